"""Offline tools over recorded logs: replay, reports and identification."""

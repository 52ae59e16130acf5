"""Tests of the web console (hil/console): its API over HTTP, and every page clicked through in Chromium."""

"""Feetech STS/SCS servo firmware: control tables (config/feetech), what a register write does, register ⇄ SI."""

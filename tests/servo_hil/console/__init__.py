"""Tests of the web console (servo_hil/console): its API over HTTP, and every page clicked through in Chromium."""

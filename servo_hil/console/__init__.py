"""The web console (docs/console.md): the daemon serves a page that shows and drives every emulated servo.

`server.Console` is the HTTP and WebSocket server; `registers` reads and writes a servo's control table through
the servo's own Write; `static/` holds the page, its script and the vendored charting library.
"""

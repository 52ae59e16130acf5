"""Host-side clients and mirrors: code that talks to real hardware through the vendors' libraries, and the
side-by-side log a mirror writes."""

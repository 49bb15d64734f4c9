"""The in-process API: the server's core without a listener, called from Python."""

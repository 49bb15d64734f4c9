"""gRPC over HTTP/2 on the event loop (a server-side HTTP/2 of its own, HPACK by the ``hpack``
package): the calls run where the rest of the server runs, with no second thread contending
for the interpreter."""

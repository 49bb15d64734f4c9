"""The KServe v2 HTTP/REST frontend with Triton's extensions: routes (``app``), the infer body
codec (``codec``), content encodings (``compression``) and the listener (``server``)."""

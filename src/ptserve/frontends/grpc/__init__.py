"""The ``inference.GRPCInferenceService`` frontend (native HTTP/2 or ``grpc.aio``), sharing the
core with HTTP."""

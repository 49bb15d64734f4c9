"""The web console: a single page shipped as static files, which calls only the HTTP API.

``assets`` loads and serves the files under ``static/``; ``schema`` describes ModelConfig's
fields for the page's ``config.pbtxt`` rendering; ``service`` is what the HTTP routes call.
"""

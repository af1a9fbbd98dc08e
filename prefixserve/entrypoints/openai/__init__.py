"""The OpenAI-compatible HTTP server (`prefixserve serve`): protocol, serving, app, CLI."""

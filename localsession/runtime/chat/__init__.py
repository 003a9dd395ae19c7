"""OpenAI chat completions over sessions: the request/response protocol (``protocol``), tool
calls (``tools``), completions bound to sessions and weights (``completions``) and streamed
chunks (``streaming``)."""

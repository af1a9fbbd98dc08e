"""OpenAIServingChat: POST /v1/chat/completions, whole or streamed.

Messages (system, user, assistant; `developer` counts as system) are rendered with the
model's chat template and tokenized without extra special tokens, exactly as
`LLM.chat` does, so the same conversation hits the same cached blocks offline and online.
Content may be a string or a list of text parts. Knows nothing about routes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from prefixserve.entrypoints.openai.protocol import ChatCompletionRequest, ChatMessage, OpenAIError
from prefixserve.entrypoints.openai.serving_engine import (
    EnginePrompt,
    OpenAIServing,
    RequestStream,
    sse_stream,
    until_disconnected,
)
from prefixserve.outputs import CompletionOutput

ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


class OpenAIServingChat(OpenAIServing):
    async def create(self, req: ChatCompletionRequest, raw: Request) -> Response:
        arrival = time.monotonic()
        self.check_model(req.model)
        if req.tools:
            raise OpenAIError("tools are not supported by this server", param="tools")
        if req.response_format and req.response_format.get("type", "text") != "text":
            raise OpenAIError("only response_format {'type': 'text'} is supported", param="response_format")
        if req.top_logprobs is not None and not req.logprobs:
            raise OpenAIError("top_logprobs needs logprobs: true", param="top_logprobs")
        prompt = self.render(req)
        logprobs = (req.top_logprobs or 0) if req.logprobs else None
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        params = self.sampling_params(req, [prompt], max_tokens, None, logprobs)
        request_id = f"chatcmpl-{uuid.uuid4().hex}"
        stream = await self.start(request_id, [prompt], params, req, arrival)
        head = {"id": request_id, "object": "chat.completion", "created": int(time.time()),
                "model": req.model or self.model_names[0]}
        if req.stream:
            head["object"] = "chat.completion.chunk"
            return StreamingResponse(sse_stream(self._chunks(req, prompt, stream, head)),
                                     media_type="text/event-stream", background=BackgroundTask(stream.abort))
        return await until_disconnected(raw, self._full(req, prompt, stream, head))

    def render(self, req: ChatCompletionRequest) -> EnginePrompt:
        if not req.messages:
            raise OpenAIError("messages must be a non-empty list", param="messages")
        messages = [self._message(i, m) for i, m in enumerate(req.messages)]
        try:
            prompt = self.tokenizer.encode_chat(messages, req.add_generation_prompt)
        except Exception as e:  # a template's raise_exception or a jinja error: the input's fault
            raise OpenAIError(f"cannot apply the chat template to these messages: {e}", param="messages") from e
        return EnginePrompt(prompt["prompt"], prompt["prompt_token_ids"])

    @staticmethod
    def _message(i: int, m: ChatMessage) -> dict[str, str]:
        role = ROLES.get(m.role)
        if role is None:
            raise OpenAIError(f"messages[{i}].role: unknown role {m.role!r}; expected system, user or assistant",
                              param=f"messages[{i}].role")
        content = m.content
        if isinstance(content, list):
            parts = []
            for part in content:
                if part.get("type") != "text" or not isinstance(part.get("text"), str):
                    raise OpenAIError(f"messages[{i}].content: only text parts are supported, got "
                                      f"{part.get('type')!r}", param=f"messages[{i}].content")
                parts.append(part["text"])
            content = "".join(parts)
        if content is None and role != "assistant":
            raise OpenAIError(f"messages[{i}].content is required for role {m.role!r}",
                              param=f"messages[{i}].content")
        return {"role": role, "content": content or ""}

    async def _full(self, req: ChatCompletionRequest, prompt: EnginePrompt, stream: RequestStream,
                    head: dict[str, Any]) -> dict[str, Any]:
        final = None
        async for _, out in stream.outputs():
            final = out
        assert final is not None and final.finished
        choices = [{"index": o.index, "message": {"role": "assistant", "content": o.text},
                    "logprobs": self._logprobs(o, 0, req.top_logprobs or 0) if req.logprobs else None,
                    "finish_reason": o.finish_reason, "stop_reason": o.stop_reason}
                   for o in final.outputs]
        completion_tokens = sum(len(o.token_ids) for o in final.outputs)
        usage = self.usage(len(prompt.token_ids), completion_tokens, final.num_cached_tokens)
        return {**head, "choices": choices, "usage": usage}

    async def _chunks(self, req: ChatCompletionRequest, prompt: EnginePrompt, stream: RequestStream,
                      head: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        sent_text: dict[int, int] = {}
        sent_tokens: dict[int, int] = {}
        finished: set[int] = set()
        cached = 0
        opts = req.stream_options
        continuous = opts is not None and opts.include_usage and opts.continuous_usage_stats
        for index in range(req.n):
            chunk = {**head, "choices": [{"index": index, "delta": {"role": "assistant", "content": ""},
                                          "logprobs": None, "finish_reason": None}]}
            if continuous:
                chunk["usage"] = self.usage(len(prompt.token_ids), 0, 0)
            yield chunk
        async for _, out in stream.outputs():
            cached = out.num_cached_tokens
            for o in out.outputs:
                if o.index in finished:
                    continue
                delta = o.text[sent_text.get(o.index, 0):]
                first_token = sent_tokens.get(o.index, 0)
                new_tokens = len(o.token_ids) - first_token
                if not delta and not o.finished and not (req.logprobs and new_tokens):
                    continue
                sent_text[o.index], sent_tokens[o.index] = len(o.text), len(o.token_ids)
                if o.finished:
                    finished.add(o.index)
                choice = {"index": o.index, "delta": {"content": delta} if delta else {},
                          "logprobs": self._logprobs(o, first_token, req.top_logprobs or 0) if req.logprobs else None,
                          "finish_reason": o.finish_reason, "stop_reason": o.stop_reason}
                chunk = {**head, "choices": [choice]}
                if continuous:
                    chunk["usage"] = self.usage(len(prompt.token_ids), sum(sent_tokens.values()), cached)
                yield chunk
        if opts is not None and opts.include_usage:
            yield {**head, "choices": [], "usage": self.usage(len(prompt.token_ids), sum(sent_tokens.values()),
                                                              cached)}

    def _logprobs(self, o: CompletionOutput, start: int, k: int) -> dict[str, Any]:
        content = []
        for tid, lps in zip(o.token_ids[start:], (o.logprobs or [])[start:], strict=False):
            top = sorted(lps.items(), key=lambda kv: -kv[1])[:k]
            content.append({**self._entry(tid, lps.get(tid, float("-inf"))),
                            "top_logprobs": [self._entry(t, lp) for t, lp in top]})
        return {"content": content}

    def _entry(self, token_id: int, logprob: float) -> dict[str, Any]:
        text = self.token_text(token_id)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

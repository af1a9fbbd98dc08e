"""OpenAIServingCompletion: POST /v1/completions, whole or streamed.

A prompt is a string, a list of strings, a list of token ids or a list of token-id lists;
each becomes one engine request with `n` completions, and choice `i * n + j` is prompt i's
completion j, as OpenAI numbers them. `echo` prepends the prompt text; `logprobs: k`
returns OpenAI's legacy logprobs block for the generated tokens. Knows nothing about routes.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.background import BackgroundTask

from prefixserve.entrypoints.openai.protocol import CompletionRequest, OpenAIError
from prefixserve.entrypoints.openai.serving_engine import (
    EnginePrompt,
    OpenAIServing,
    RequestStream,
    sse_stream,
    until_disconnected,
)
from prefixserve.outputs import CompletionOutput

_PROMPT_FORMS = "a string, a list of strings, a list of token ids or a list of token-id lists"


class OpenAIServingCompletion(OpenAIServing):
    async def create(self, req: CompletionRequest, raw: Request) -> Response:
        arrival = time.monotonic()
        self.check_model(req.model)
        if req.suffix:
            raise OpenAIError("suffix is not supported", param="suffix")
        if req.echo and req.logprobs is not None:
            raise OpenAIError("echo with logprobs is not supported (no prompt logprobs)", param="echo")
        prompts = self.parse_prompts(req.prompt)
        params = self.sampling_params(req, prompts, req.max_tokens, 16, req.logprobs)
        request_id = f"cmpl-{uuid.uuid4().hex}"
        stream = await self.start(request_id, prompts, params, req, arrival)
        head = {"id": request_id, "object": "text_completion", "created": int(time.time()),
                "model": req.model or self.model_names[0]}
        if req.stream:
            return StreamingResponse(sse_stream(self._chunks(req, prompts, stream, head)),
                                     media_type="text/event-stream", background=BackgroundTask(stream.abort))
        return await until_disconnected(raw, self._full(req, prompts, stream, head))

    def parse_prompts(self, prompt: Any) -> list[EnginePrompt]:
        if prompt is None:
            raise OpenAIError("prompt is required", code="missing_required_parameter", param="prompt")
        if isinstance(prompt, str):
            return [self._text_prompt(prompt)]
        if not isinstance(prompt, list) or not prompt:
            raise OpenAIError(f"prompt must be {_PROMPT_FORMS} (non-empty), got {type(prompt).__name__}",
                              param="prompt")
        if all(isinstance(p, str) for p in prompt):
            return [self._text_prompt(p) for p in prompt]
        if all(isinstance(p, list) for p in prompt):
            return [EnginePrompt(None, self.check_token_ids(p, "prompt")) for p in prompt]
        if any(isinstance(p, (str, list, dict)) for p in prompt):
            raise OpenAIError(f"prompt must be {_PROMPT_FORMS}; do not mix them", param="prompt")
        return [EnginePrompt(None, self.check_token_ids(prompt, "prompt"))]

    def _text_prompt(self, text: str) -> EnginePrompt:
        if not text:
            raise OpenAIError("prompt must not be empty", param="prompt")
        return EnginePrompt(text, self.tokenizer.encode(text))

    def _prompt_text(self, prompt: EnginePrompt) -> str:
        return prompt.text if prompt.text is not None else self.tokenizer.decode(prompt.token_ids)

    async def _full(self, req: CompletionRequest, prompts: list[EnginePrompt], stream: RequestStream,
                    head: dict[str, Any]) -> dict[str, Any]:
        finals = {}
        async for i, out in stream.outputs():
            if out.finished:
                finals[i] = out
        choices, completion_tokens, cached = [], 0, 0
        for i, prompt in enumerate(prompts):
            out = finals[i]
            cached += out.num_cached_tokens
            for o in out.outputs:
                completion_tokens += len(o.token_ids)
                text = (self._prompt_text(prompt) if req.echo else "") + o.text
                choices.append({"index": i * req.n + o.index, "text": text,
                                "logprobs": self._logprobs(o, 0, req.logprobs, 0),
                                "finish_reason": o.finish_reason, "stop_reason": o.stop_reason})
        choices.sort(key=lambda c: c["index"])
        prompt_tokens = sum(len(p.token_ids) for p in prompts)
        return {**head, "choices": choices, "usage": self.usage(prompt_tokens, completion_tokens, cached)}

    async def _chunks(self, req: CompletionRequest, prompts: list[EnginePrompt], stream: RequestStream,
                      head: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        sent_text: dict[int, int] = {}
        sent_tokens: dict[int, int] = {}
        text_offset: dict[int, int] = {}
        finished: set[int] = set()
        cached = [0] * len(prompts)
        prompt_tokens = sum(len(p.token_ids) for p in prompts)
        opts = req.stream_options
        async for i, out in stream.outputs():
            cached[i] = out.num_cached_tokens
            for o in out.outputs:
                index = i * req.n + o.index
                if index in finished:
                    continue
                start = sent_text.get(index)
                delta = o.text[start or 0:]
                if start is None and req.echo:
                    delta = self._prompt_text(prompts[i]) + delta
                first_token = sent_tokens.get(index, 0)
                new_tokens = len(o.token_ids) - first_token
                if not delta and not o.finished and not (req.logprobs is not None and new_tokens):
                    continue
                sent_text[index], sent_tokens[index] = len(o.text), len(o.token_ids)
                if o.finished:
                    finished.add(index)
                choice = {"index": index, "text": delta,
                          "logprobs": self._logprobs(o, first_token, req.logprobs, text_offset.get(index, 0)),
                          "finish_reason": o.finish_reason, "stop_reason": o.stop_reason}
                text_offset[index] = text_offset.get(index, 0) + len(delta)
                chunk = {**head, "choices": [choice]}
                if opts is not None and opts.include_usage and opts.continuous_usage_stats:
                    chunk["usage"] = self.usage(prompt_tokens, sum(sent_tokens.values()), sum(cached))
                yield chunk
        if opts is not None and opts.include_usage:
            yield {**head, "choices": [], "usage": self.usage(prompt_tokens, sum(sent_tokens.values()),
                                                              sum(cached))}

    def _logprobs(self, o: CompletionOutput, start: int, k: int | None, offset: int) -> dict[str, Any] | None:
        """OpenAI's legacy block for tokens [start:] of one completion."""
        if k is None or not o.logprobs:
            return None
        block: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for tid, lps in zip(o.token_ids[start:], o.logprobs[start:], strict=False):
            text = self.token_text(tid)
            top = sorted(lps.items(), key=lambda kv: -kv[1])[:k]
            block["tokens"].append(text)
            block["token_logprobs"].append(lps.get(tid))
            block["top_logprobs"].append({self.token_text(t): lp for t, lp in top} if k else None)
            block["text_offset"].append(offset)
            offset += len(text)
        return block

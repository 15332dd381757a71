"""Generative decoders end to end: every engine's decoder variant built from the same saved model, judged token
by token against the float model (teacher-forced agreement, perplexity with its interval, greedy continuations,
and the file's own KV cache against its prefill), and timed as a phone runs it - time to first token for a
prompt, then tokens per second decoding with the cache - in interleaved, raced rounds, beside this machine's
memory-bandwidth bound.  ``mobilize compare`` comes here for a causal LM (``--task generation``)."""

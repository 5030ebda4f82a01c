"""Long-memory benchmark (issue 32): does Quinn answer right when a person's history no longer fits the model?

People with histories of 100+ mails over two years and more, imported with `quinn import` (the real Importer:
threads, recall passages, files, memory by extraction per thread and by the session jobs), then a request to
forget something sent live, then questions as new mail, of ten kinds (bench/long_memory/data.py): single facts,
long-ago facts, updated facts (old values must not be given as current), knock-on updates, forgotten facts,
absence ("you haven't told me"), temporal, multi-hop, attachment-only values, preferences applied.

Four conditions in one run, same model and template (bench/long_memory/run.py): Quinn; no memory; the most recent
history that fits the context; plain BM25 top-k passages pasted. Per condition and kind: accuracy, recall in
prompt, stale rate, forget leaks, tokens and seconds per question (bench/long_memory/report.py).

Half of the people are generated here (data.py, deterministic); the other half come from public human-written
conversations turned into mail, read from a file by ``--real`` (real.py: the hook and its format;
real_friends.py builds the file from FriendsQA's scenes and questions, fetched beforehand; nothing here downloads a
data set). ``--fast`` runs the harness on the scripted model (tests/bench/test_long_memory.py, CI);
the real 1.5B model runs in parts (``--people``/``--skip``) merged with ``--merge``: see ``__main__``.
"""

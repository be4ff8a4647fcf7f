"""Stage 2: text sources on disk -> token shards on disk (torch-free).

formats (each input format one registered class; codecs; inputs read through an opened input) -> sources
(files, folders, globs, stdin; spans) -> units (the plan; tokenizing one part) -> engines
(local processes, Ray) -> prepare (orchestration, resume) -> format (manifest, shard entries) -> reader
(`ShardSet`, `open_shards`) and check (`tokembed check`).
"""

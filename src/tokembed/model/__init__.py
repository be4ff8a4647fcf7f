"""Stage 5: embeddings -> a small GPT: config, attention (given its positional module), loss, checkpoints,
and GPT-2's own embedding tables read from a local file."""

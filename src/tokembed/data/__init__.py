"""Stage 3: token streams -> sliding windows -> batches.

plan (window counts, rank plans: torch-free arithmetic) -> windows (`SlidingWindowDataset`) -> book (the
chapter's drop-ins) -> shuffle (a Feistel permutation) -> loader (`create_dataloader`: ranks, workers,
exact resume); stats (`tokembed stats`).
"""

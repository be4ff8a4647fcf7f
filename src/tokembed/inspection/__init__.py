"""Stage 7: what the embeddings learned: the table and its questions, loading, counts, projections, plots,
the HTML report and exports."""

"""Where a large replay runs: worker processes, and the memory they keep between batches."""

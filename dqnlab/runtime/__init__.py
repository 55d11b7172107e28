"""What every scheme's run shares: the run loop and its end, checkpoints, results, TensorBoard logs."""

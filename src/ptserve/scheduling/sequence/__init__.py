"""The sequence batcher: stateful models, one slot per live sequence."""

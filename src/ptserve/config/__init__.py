"""The model configuration: ``config.pbtxt`` parsed into Triton's ``ModelConfig`` message,
auto-completed, validated, rendered, and read into the per-model IO plan."""

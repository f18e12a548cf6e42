"""The Edge TPU's rules and facts, pure: which operators map (check), the compiler's files and
output, pipeline segments, clock and heat meanings, operation counts, datasheet numbers."""

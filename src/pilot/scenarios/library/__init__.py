"""One module per scenario: its deterministic input generator and its reference solver.

Each module defines ``generate(inputs_dir) -> list[Path]`` (the committed
inputs, byte-stable) and ``solve(inputs_dir, outputs_dir) -> list[Path]``
(the gold deliverables, read from the inputs, completion record included).
"""

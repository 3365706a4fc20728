"""What the graded patch may not do: the grading policy (DESIGN.md §9)."""

"""The problems: loading and splitting them, what a number is, grading answers."""

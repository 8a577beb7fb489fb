"""Helpers of the visual-math skill: question parsing, relation search over given numbers, figure measurement."""

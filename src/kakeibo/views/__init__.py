"""Differentially private views: built once, charged once, then queried without further cost (seed 002,
slides 54-59). :mod:`.hdpview` builds the view of a count tensor."""

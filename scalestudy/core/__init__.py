"""Pure data and rules: the spec and its loading, errors, the grid of runs, states."""

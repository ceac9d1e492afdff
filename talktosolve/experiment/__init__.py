"""The experiment: training runs and their pool, who sits in each seat, evaluation, the recipe, results, report."""

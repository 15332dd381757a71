"""Plans: named lists of recipes (``plan``), a user's plan file (``file``) and fitting a plan to a model (``fit``)."""

"""Examples of the runplane framework SDK (also run by the tests)."""

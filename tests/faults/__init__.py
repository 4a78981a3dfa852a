"""Fault injection for the feature store and the featurize job: every fault ends in correct data or one named error."""

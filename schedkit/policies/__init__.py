"""Policies that ship with schedkit."""

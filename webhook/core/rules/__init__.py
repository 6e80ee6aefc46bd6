"""Rejections and warnings (SPEC section 5), one module per family.

Each rule is a plain function returning every violation it finds; rules are independent and
assume nothing about other rules having run. Audit enforcement is applied at the edge, never
inside a rule.
"""

"""Pure plans derived from a ClusterSpec (no Pulumi): where every node, switch, link and storage replica goes.

The policy checks these plans, the components create exactly what they list, and the unit tests read them directly.
"""

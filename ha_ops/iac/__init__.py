"""Infrastructure as code: the Pulumi engine run offline, and the Pulumi programs and components of ha-ops."""

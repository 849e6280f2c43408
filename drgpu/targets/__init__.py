"""What a plan becomes: the Compose override, the Swarm stack, Kubernetes manifests."""

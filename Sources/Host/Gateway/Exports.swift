// The gateway library (`SoulacyGateway`) is the host's parts assembled: an embedder imports this one module.
@_exported import Agents
@_exported import Approvals
@_exported import GatewayHTTP
@_exported import Household
@_exported import Memory
@_exported import RelayCarriage

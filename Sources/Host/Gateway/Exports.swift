// The gateway library (`SoulacyGateway`) is the host's parts assembled: an embedder imports this one module.
@_exported import Agents
// What a channel or transport an embedder adds is written against.
@_exported import ChannelAPI
@_exported import Approvals
@_exported import GatewayHTTP
@_exported import Household
@_exported import Memory
@_exported import PhoneTools
@_exported import RelayCarriage

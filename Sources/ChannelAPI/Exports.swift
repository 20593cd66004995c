// The logger lives in its own target so the API kit can carry one without knowing channels; plugins still get it
// from here.
@_exported import Logging

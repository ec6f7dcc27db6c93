package node

// A caller's request headers ride in its context (protocol.WithMeta) to the
// requests it makes: Request and protocol.CallNodeWait put them in the request's
// metadata, and the owner's handler reads them from Request.Meta.

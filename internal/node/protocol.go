package node

import (
	"fmt"

	"github.com/fero-go/fero/internal/errs"
)

// Protocol versions (docs/operations.md, "Upgrades"). Two servers of one
// cluster may run different builds during a rolling upgrade: each says in
// its hello the range of protocol versions it speaks and the optional
// features it has, and the two speak the highest version both know.
//
//   - Protocol 1 is the data plane as it was before the hello carried a
//     version (up to commit 0a70971): a hello without a version is one.
//   - Protocol 2 adds the version and the features to the hello; nothing
//     else differs, so a node of protocol 2 speaks to one of protocol 1
//     exactly as that one speaks.
//
// A change that an older node would refuse or misread (a new frame kind,
// a new op, a new record type on the data plane) is either a feature
// (named in Features, and sent only to a peer whose hello lists it) or a
// new protocol version; a node refuses a peer whose range does not meet
// its own, with an error naming both, rather than exchange frames it
// cannot read.
const (
	// ProtocolVersion is the newest protocol this build speaks.
	ProtocolVersion = 2
	// MinProtocol is the oldest protocol this build speaks: a rolling
	// upgrade may mix this build with builds that speak it.
	MinProtocol = 1
)

// Features are the optional capabilities this build has, beyond what its
// protocol versions imply, named in its hello. None yet: every capability
// of this build is in protocol 1. The first feature added after protocol
// 2 is named here, and its frames go only to peers that list it.
var Features []string

// protoRange is the range of protocol versions a node speaks.
type protoRange struct{ min, max uint32 }

// ours is this build's range.
var ours = protoRange{MinProtocol, ProtocolVersion}

// rangeOf is the range a hello announces: one without a version is
// protocol 1's, the dialect before versions.
func rangeOf(h hello) protoRange {
	if h.Proto == 0 {
		return protoRange{1, 1}
	}
	return protoRange{max(h.MinProto, 1), h.Proto}
}

// announce adds this node's range and features to h; a node that speaks
// protocol 1 alone says nothing, as the builds before versions did.
func (r protoRange) announce(h *hello) {
	if r.max <= 1 {
		return
	}
	h.Proto, h.MinProto, h.Feat = r.max, r.min, Features
}

// negotiate returns the version two nodes of ranges mine and theirs
// speak, the highest both know, or an error naming both ranges when they
// do not meet. peer names the other node for the error.
func negotiate(mine, theirs protoRange, peer string) (uint32, error) {
	v := min(mine.max, theirs.max)
	if v < mine.min || v < theirs.min || theirs.min > theirs.max {
		return 0, errs.New(errs.FailedPrecondition, fmt.Sprintf(
			"fero: %s speaks protocol %s and this node %s: they have no version in common; "+
				"upgrade one at a time through a release that speaks both (docs/operations.md, \"Upgrades\")",
			peer, theirs, mine))
	}
	return v, nil
}

func (r protoRange) String() string {
	if r.min == r.max {
		return fmt.Sprint(r.min)
	}
	return fmt.Sprintf("%d-%d", r.min, r.max)
}

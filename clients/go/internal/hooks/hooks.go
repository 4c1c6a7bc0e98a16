// Package hooks switches on behaviours of package lease that exist only to be caught: the
// negative controls of the conformance campaign (docs/conformance.md). It is internal, so
// nothing outside this module can reach it; cmd/lease-elector is its only user.
package hooks

// ReuseOwner, set by package lease's init, makes an *lease.Elector (passed as any, to avoid an
// import cycle) send the same owner in every reign: the behaviour before protocol R17, which
// lets a late RELEASE of an earlier reign end a later one. Call it before Run.
var ReuseOwner func(elector any)

// QuorumControl, set by package lease's init, switches an *lease.Elector in quorum mode to a
// deliberately broken variant ("no-unify": no raise, each node keeps its own token;
// "minority": lead on one grant) or back to "correct". Errors for an unknown name or an
// elector not in quorum mode. Call it before Run.
var QuorumControl func(elector any, name string) error

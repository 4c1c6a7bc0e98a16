// Package hooks switches on behaviours of package lease that exist only to be caught: the
// negative controls of the conformance campaign (docs/conformance.md). It is internal, so
// nothing outside this module can reach it; cmd/lease-elector is its only user.
package hooks

// ReuseOwner, set by package lease's init, makes an *lease.Elector (passed as any, to avoid an
// import cycle) send the same owner in every reign: the behaviour before protocol R17, which
// lets a late RELEASE of an earlier reign end a later one. Call it before Run.
var ReuseOwner func(elector any)

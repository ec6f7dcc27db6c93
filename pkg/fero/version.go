package fero

// SupportPackageIsVersion1 is referenced by code ferogen generates, so that
// generated code fails to compile against a pkg/fero it was not made for.
// A change to what generated code relies on adds SupportPackageIsVersion2
// and the generator moves to it.
const SupportPackageIsVersion1 = true

// SupportPackageIsVersion2 is referenced by code ferogen generates from
// the version that took Caller and RequestFromContext from pkg/fero
// rather than declaring its own.
const SupportPackageIsVersion2 = true

// SupportPackageIsVersion3 is referenced by code ferogen generates from
// the version that generates streaming verbs (OpenStream, ForEach).
const SupportPackageIsVersion3 = true

// SupportPackageIsVersion4 is referenced by code ferogen generates from
// the version that marks verbs //fero:concurrent, for a resource that
// has such a verb: its Register function combines WithHandler and
// Concurrent with [Options].
const SupportPackageIsVersion4 = true

// SupportPackageIsVersion5 is referenced by code ferogen generates from
// the version whose Register functions return a [NodeOption] (options
// typed by what reads them: [Open], [Dial] or both).
const SupportPackageIsVersion5 = true

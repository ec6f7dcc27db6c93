// Package ferogen is the generator behind cmd/ferogen: it reads fero
// resources declared as Go interfaces and writes their typed binding.
//
// # Declarations
//
// A declaration package is ordinary Go. An interface whose doc comment
// holds the directive //fero:resource <name> declares a resource; each of
// its methods is a verb:
//
//	//fero:resource users
//	type Users interface {
//		Login(ctx context.Context, req *LoginRequest) (*LoginReply, error)
//		//fero:verb SIGNOUT
//		Logout(ctx context.Context, req *LogoutRequest) error
//	}
//
// A method is func(context.Context, *Req) (*Reply, error) or
// func(context.Context, *Req) error, with Req and Reply exported named
// structs that msgpack encodes and decodes (no channel, function, complex,
// unsafe.Pointer or interface with methods among their encoded fields).
// Exactly one field of Req, a string or a named string type, is tagged
// `fero:"key"`, in Req or in a struct it embeds (the shallowest tagged
// field counts, as Go's selectors pick it): the request goes to the owner
// of that key's partition. The verb is the method's name in upper case
// with words separated by '_' (VerbOf, a rule frozen for the wire's
// sake), after the resource's verb prefix if it has one (//fero:resource
// <name> verbprefix=STOCK_, so that Get is STOCK_GET), or the directive
// //fero:verb <VERB> in the method's doc comment, used as written; it is
// ASCII, and may not be one of fero's built-in verbs. The directive
// //fero:concurrent in a method's doc comment says the verb only reads:
// it runs without its key's turn (fero.Concurrent). It is refused on a
// streaming method, which never takes a turn. Any other //fero:
// comment is an error, and so is "// fero:" with a space, so that a typo
// does not go unnoticed. An alias is not a resource: the directive
// marks an interface's own declaration.
//
// Load reads declarations with golang.org/x/tools/go/packages, types
// resolved and positions kept, and the import graph, with a second, light
// call. A bad declaration is an ErrorList, one "file:line:col: message"
// per problem.
//
// # Output
//
// Generate renders two files. The generated file, in a package of its own
// (DefaultOut: the declarations cannot import what is generated from
// them), starts with Header and holds per resource: the resource's name,
// a constant per verb, Register<Iface> (a fero.NodeOption mounting an
// implementation, with fero.Concurrent for the verbs marked concurrent)
// and <Iface>Handler, New<Iface>Client (the interface,
// implemented by calls to the owner of each request's key), and
// Unimplemented<Iface>; once per package, RequestFromContext, which hands
// a method the fero.Request it answers, and a reference to
// fero.SupportPackageIsVersion5 (the first with fero.NodeOption, which
// Register<Iface> returns), so that it stops compiling against a pkg/fero
// it was not made for. The stub (DefaultStub) is a starting
// implementation that embeds Unimplemented<Iface>.
//
// Generate refuses output that would not build: a generated package the
// declarations could not import, an import the go command's rule for
// internal directories forbids, or an import cycle.
//
// Output is deterministic: the same declarations give the same bytes,
// formatted with go/format. Write replaces the generated file when it
// changed, creates the stub only if absent, and otherwise reads the stub's
// package with go/parser (a stub being edited need not compile) to note
// the methods it lacks.
package ferogen

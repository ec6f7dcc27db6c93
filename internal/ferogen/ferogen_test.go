package ferogen

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/packages"

	"github.com/fero-go/fero/pkg/fero"
)

var update = flag.Bool("update", false, "rewrite the expected files under testdata with what ferogen makes now")

// The golden cases:
//
//	testdata/ok/<case>/     a declaration package, and beside it what
//	                        ferogen generates for it with the default
//	                        options (or those in ferogen.flags): the
//	                        generated package and the stub
//	testdata/bad/<case>/    a bad declaration package, and errors.txt, the
//	                        errors ferogen reports, file names relative
//	                        to the case
//
// `go test ./internal/ferogen -update` rewrites the expected files. Every
// case is loaded in one go/packages call, and the expected files in one
// more, since each call runs the go command.

var headerRE = regexp.MustCompile(`^// Code generated .* DO NOT EDIT\.$`)

func TestGolden(t *testing.T) {
	ok, bad := cases(t, "testdata/ok"), cases(t, "testdata/bad")
	start := time.Now()
	pkgs, err := Load(testContext(t), append(ok, bad...)...)
	require.NoError(t, err)
	t.Logf("loaded %d cases in %v", len(pkgs), time.Since(start))
	var built []string // the directories of the expected packages
	for i, dir := range ok {
		p := pkgs[i]
		t.Run("ok/"+filepath.Base(dir), func(t *testing.T) {
			require.NoError(t, p.Err)
			opt := caseOptions(t, dir)
			out, err := Generate(p, opt)
			require.NoError(t, err)
			lines := strings.SplitN(string(out.Generated.Content), "\n", 2)
			assert.Regexp(t, headerRE, lines[0], "the generated file's header")
			assert.NotRegexp(t, `(?m)^// Code generated .* DO NOT EDIT\.$`, string(out.Stub.Content), "the stub is the user's")
			again, err := Generate(p, opt)
			require.NoError(t, err)
			assert.Equal(t, out.Generated.Content, again.Generated.Content, "deterministic")
			assert.Equal(t, out.Stub.Content, again.Stub.Content, "deterministic")
			golden(t, out.Generated.Path, out.Generated.Content)
			golden(t, out.Stub.Path, out.Stub.Content)
			built = append(built, filepath.Dir(out.Generated.Path), filepath.Dir(out.Stub.Path))
		})
	}
	for i, dir := range bad {
		p := pkgs[len(ok)+i]
		t.Run("bad/"+filepath.Base(dir), func(t *testing.T) {
			_, err := Generate(p, Options{})
			var list ErrorList
			require.True(t, errors.As(err, &list), "want an ErrorList, got %v", err)
			golden(t, filepath.Join(dir, "errors.txt"), []byte(list.Relative(dir).Error()+"\n"))
		})
	}
	// The expected files are what ferogen generates (when the cases above
	// pass): they must type-check, the stubs against the generated code.
	t.Run("build", func(t *testing.T) {
		require.NotEmpty(t, built)
		cfg := &packages.Config{Context: testContext(t), Dir: built[0],
			Mode: packages.NeedName | packages.NeedSyntax | packages.NeedTypes | packages.NeedTypesInfo}
		start := time.Now()
		loaded, err := packages.Load(cfg, built...)
		require.NoError(t, err)
		t.Logf("type-checked %d packages in %v", len(loaded), time.Since(start))
		require.Len(t, loaded, len(built))
		for _, p := range loaded {
			for _, e := range p.Errors {
				t.Errorf("%s: %v", p.PkgPath, e)
			}
		}
	})
}

// cases lists the case directories under dir.
func cases(t *testing.T, dir string) []string {
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			abs, err := filepath.Abs(filepath.Join(dir, e.Name()))
			require.NoError(t, err)
			dirs = append(dirs, abs)
		}
	}
	require.NotEmpty(t, dirs)
	return dirs
}

// caseOptions reads a case's ferogen.flags, ferogen's --out and --stub.
func caseOptions(t *testing.T, dir string) Options {
	b, err := os.ReadFile(filepath.Join(dir, "ferogen.flags"))
	if errors.Is(err, os.ErrNotExist) {
		return Options{}
	}
	require.NoError(t, err)
	var opt Options
	f := strings.Fields(string(b))
	require.True(t, len(f)%2 == 0, "ferogen.flags: flag value pairs")
	for i := 0; i < len(f); i += 2 {
		switch f[i] {
		case "--out":
			opt.Out = f[i+1]
		case "--stub":
			opt.Stub = f[i+1]
		default:
			t.Fatalf("ferogen.flags: unknown flag %s", f[i])
		}
	}
	return opt
}

// golden compares got with the file at path, or with -update writes it.
func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is missing: run go test ./internal/ferogen -update", path)
		return
	}
	require.NoError(t, err)
	if d := lineDiff(string(want), string(got)); d != "" {
		t.Errorf("%s differs from what ferogen makes now (-update rewrites it):\n%s", path, d)
	}
}

// basic is the loaded case testdata/ok/basic, loaded once for the tests
// that need a package.
func basic(t *testing.T) *Package {
	basicOnce.Do(func() {
		pkgs, err := Load(testContext(t), "testdata/ok/basic")
		require.NoError(t, err)
		basicPkg = pkgs[0]
	})
	require.NotNil(t, basicPkg)
	return basicPkg
}

var (
	basicOnce sync.Once
	basicPkg  *Package
)

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestVerbOf: verbs go on the wire, so a method's verb may never change;
// docs/ferogen.md states the rule these cases follow.
func TestVerbOf(t *testing.T) {
	for _, c := range []struct{ method, verb string }{
		// Ordinary words.
		{"Login", "LOGIN"},
		{"GetUser", "GET_USER"},
		{"ResetPassword", "RESET_PASSWORD"},
		{"AddItem", "ADD_ITEM"},
		{"A", "A"},
		{"ABTest", "AB_TEST"},
		{"login", "LOGIN"},
		{"lowerCamel", "LOWER_CAMEL"},
		// Upper-case runs: the last capital before lower case starts a word.
		{"URL", "URL"},
		{"GetURL", "GET_URL"},
		{"HTTPProxy", "HTTP_PROXY"},
		{"UserID", "USER_ID"},
		{"SetHTTPHeader", "SET_HTTP_HEADER"},
		{"XMLHTTPRequest", "XML_HTTP_REQUEST"},
		{"ServeHTTP", "SERVE_HTTP"},
		{"NewHTTPSServer", "NEW_HTTPS_SERVER"},
		{"PDFExport", "PDF_EXPORT"},
		{"ExportPDF", "EXPORT_PDF"},
		// Runs of known initialisms split into them; other runs stay whole.
		{"MyHTTPAPI", "MY_HTTP_API"},
		{"HTTPAPIServer", "HTTP_API_SERVER"},
		{"JSONRPC", "JSON_RPC"},
		{"HTTPSURL", "HTTPS_URL"},
		{"CPUID", "CPU_ID"},
		{"IDURL", "ID_URL"},
		{"GetPDFURL", "GET_PDFURL"},
		{"ABC", "ABC"},
		// The plural s of an upper-case run.
		{"IDs", "IDS"},
		{"GetURLs", "GET_URLS"},
		{"IDsByName", "IDS_BY_NAME"},
		{"UserIDs", "USER_IDS"},
		{"ListAPIs", "LIST_APIS"},
		{"MyHTTPAPIs", "MY_HTTP_APIS"},
		{"GetPDFs", "GET_PDFS"},
		{"CPUs2", "CPUS2"},
		{"As", "AS"},
		{"IsOK", "IS_OK"},
		{"URLsort", "UR_LSORT"},
		// Digits end the word they follow.
		{"Login2", "LOGIN2"},
		{"V2Login", "V2_LOGIN"},
		{"OAuth2Token", "OAUTH2_TOKEN"},
		{"Base64Encode", "BASE64_ENCODE"},
		{"UTF8String", "UTF8_STRING"},
		{"HTTP2Push", "HTTP2_PUSH"},
		{"S3Bucket", "S3_BUCKET"},
		{"Sha256", "SHA256"},
		// The words written in mixed case.
		{"OAuth", "OAUTH"},
		{"GetOAuthToken", "GET_OAUTH_TOKEN"},
		{"IPv4Address", "IPV4_ADDRESS"},
		{"LookupIPv6", "LOOKUP_IPV6"},
		{"OAuthor", "O_AUTHOR"},
		// An underscore is kept, and ends a word.
		{"Get_User", "GET_USER"},
		{"Get__User", "GET__USER"},
		{"HTTP_Proxy", "HTTP_PROXY"},
		{"Get_2FA", "GET_2FA"},
		// Not ASCII: kept as they are; the reader refuses such a verb.
		{"ÜberCount", "ÜBER_COUNT"},
	} {
		assert.Equal(t, c.verb, VerbOf(c.method), c.method)
	}
}

func TestBuiltinVerbs(t *testing.T) {
	assert.Equal(t, map[string]bool{fero.VerbAdd: true, fero.VerbUpdate: true, fero.VerbRemove: true, fero.VerbGet: true}, builtin)
}

func TestParsePos(t *testing.T) {
	for s, want := range map[string]string{
		"/a/b.go:3:4": "/a/b.go:3:4",
		"/a/b.go:3":   "/a/b.go:3",
		"c:/a/b.go:3": "c:/a/b.go:3",
		"/a/b.go":     "/a/b.go",
		"-":           "-",
		"":            "-",
	} {
		assert.Equal(t, want, parsePos(s).String(), s)
	}
}

func TestPackageName(t *testing.T) {
	for dir, name := range map[string]string{
		"usersfero": "usersfero",
		"Users-API": "usersapi",
		"v2":        "v2",
		"2fa":       "pkg2fa",
		"type":      "pkgtype",
		"---":       "pkg",
	} {
		assert.Equal(t, name, packageName(dir), dir)
	}
}

// TestWrite: the generated file is replaced only when it changes, the
// stub is written once and never again, and a stub that lacks methods is
// reported, at its type, with the verbs it answers CodeUnimplemented.
func TestWrite(t *testing.T) {
	tmp := t.TempDir()
	// Generate places the output in the module (import paths depend on
	// it); Write writes where the Output says, here a temporary directory.
	out, err := Generate(basic(t), Options{})
	require.NoError(t, err)
	out.Generated.Path = filepath.Join(tmp, "gen", filepath.Base(out.Generated.Path))
	out.Stub.Path = filepath.Join(tmp, "impl", "impl.go")

	res, err := out.Write()
	require.NoError(t, err)
	assert.Equal(t, []string{out.Generated.Path, out.Stub.Path}, res.Wrote)
	assert.Empty(t, res.Notes)

	res, err = out.Write()
	require.NoError(t, err)
	assert.Empty(t, res.Wrote, "nothing changed")
	assert.Empty(t, res.Notes, "the stub has every method")

	// The user implements Login in the stub, and moves Logout to a file of
	// its own; then deletes it.
	stub := bytes.Replace(out.Stub.Content, []byte(`"users: LOGIN is not implemented yet"`), []byte(`"mine"`), 1)
	i := bytes.Index(stub, []byte("// Logout answers"))
	require.Positive(t, i)
	require.NoError(t, os.WriteFile(out.Stub.Path, stub[:i], 0o644))
	other := filepath.Join(tmp, "impl", "logout.go")
	require.NoError(t, os.WriteFile(other, append([]byte("package basicimpl\n\n"), stub[i:]...), 0o644))
	res, err = out.Write()
	require.NoError(t, err)
	assert.Empty(t, res.Wrote)
	assert.Empty(t, res.Notes, "Logout is in another file of the package")
	require.NoError(t, os.Remove(other))

	res, err = out.Write()
	require.NoError(t, err)
	assert.Empty(t, res.Wrote, "the stub is never rewritten")
	kept, err := os.ReadFile(out.Stub.Path)
	require.NoError(t, err)
	assert.Equal(t, stub[:i], kept)
	require.Len(t, res.Notes, 1)
	assert.Regexp(t, `^impl\.go:\d+:6: UsersService lacks Logout \(verb LOGOUT of Users\): it answers CodeUnimplemented until you add it$`,
		res.Notes.Relative(filepath.Join(tmp, "impl")).Error())

	// A renamed type is noted, not checked.
	require.NoError(t, os.WriteFile(out.Stub.Path, bytes.ReplaceAll(kept, []byte("UsersService"), []byte("Service")), 0o644))
	res, err = out.Write()
	require.NoError(t, err)
	require.Len(t, res.Notes, 1)
	assert.Contains(t, res.Notes[0].Error(), "no longer declares UsersService")

	// A generated file that was edited is replaced.
	require.NoError(t, os.WriteFile(out.Generated.Path, []byte("// edited\n"), 0o644))
	res, err = out.Write()
	require.NoError(t, err)
	assert.Equal(t, []string{out.Generated.Path}, res.Wrote)
	got, err := os.ReadFile(out.Generated.Path)
	require.NoError(t, err)
	assert.Equal(t, out.Generated.Content, got)
}

// TestOptions: where the output may go.
func TestOptions(t *testing.T) {
	p := basic(t)
	for _, c := range []struct {
		opt Options
		err string
	}{
		{Options{Out: "."}, "is the declaration package's"},
		{Options{Stub: "impl.go"}, "is in the declaration package"},
		{Options{Stub: "{pkg}fero/impl.go"}, "is in the generated package"},
		{Options{Stub: "impl/impl_test.go"}, "must be a .go file, not a test"},
		{Options{Stub: "impl/impl.txt"}, "must be a .go file, not a test"},
		{Options{Out: "/elsewhere"}, "is outside module"},
	} {
		_, err := Generate(p, c.opt)
		if assert.Error(t, err, "%+v", c.opt) {
			assert.Contains(t, err.Error(), c.err, "%+v", c.opt)
		}
	}
	out, err := Generate(p, Options{NoStub: true})
	require.NoError(t, err)
	assert.Nil(t, out.Stub)
	out, err = Generate(p, Options{Out: "gen/{pkg}v2", Stub: "cmd/my-server/impl.go"})
	require.NoError(t, err)
	assert.Equal(t, filepath.Join(p.Dir, "gen", "basicv2", "basic.fero.go"), out.Generated.Path)
	assert.Contains(t, string(out.Generated.Content), "\npackage basicv2\n")
	assert.Contains(t, string(out.Stub.Content), "\npackage myserver\n")
	assert.Contains(t, string(out.Stub.Content), `"github.com/fero-go/fero/internal/ferogen/testdata/ok/basic/gen/basicv2"`)
}

func TestLoadErrors(t *testing.T) {
	pkgs, err := Load(testContext(t), "testdata", "testdata/ok/basic/basicfero", "testdata/nowhere")
	require.NoError(t, err)
	require.Len(t, pkgs, 3)
	assert.ErrorContains(t, pkgs[0].Err, "no Go files in")
	assert.ErrorContains(t, pkgs[1].Err, "no interface in package basicfero is marked //fero:resource")
	assert.ErrorContains(t, pkgs[2].Err, "testdata/nowhere: not a directory")
}

// TestOutputMustBuild: ferogen refuses, before it writes anything, output
// that would not build: a package the Go rules for internal directories
// keep from an import it needs, or an import cycle.
func TestOutputMustBuild(t *testing.T) {
	mod := t.TempDir()
	writeFiles(t, mod, map[string]string{
		"go.mod": "module example.com/shop\n\ngo 1.26\n",
		"users/users.go": `package users

import (
	"context"

	"example.com/shop/model"
	"example.com/shop/users/api"
	"example.com/shop/util"
)

//fero:resource users
type Users interface {
	Login(ctx context.Context, req *api.LoginRequest) (*model.Session, error)
}

var _ = util.Zero
`,
		"users/api/api.go":     "package api\n\ntype LoginRequest struct {\n\tEmail string `fero:\"key\"`\n}\n",
		"model/model.go":       "package model\n\ntype Session struct {\n\tToken string\n}\n",
		"util/util.go":         "package util\n\nimport \"example.com/shop/shared\"\n\nvar Zero shared.Token\n",
		"shared/shared.go":     "package shared\n\ntype Token string\n",
		"a/internal/decl/d.go": "package decl\n\nimport \"context\"\n\n//fero:resource things\ntype Things interface {\n\tPut(ctx context.Context, req *Request) error\n}\n\ntype Request struct {\n\tKey string `fero:\"key\"`\n}\n",
	})
	pkgs, err := Load(testContext(t), filepath.Join(mod, "users"), filepath.Join(mod, "a/internal/decl"))
	require.NoError(t, err)
	users, decl := pkgs[0], pkgs[1]
	require.NoError(t, users.Err)
	require.NoError(t, decl.Err)
	for _, c := range []struct {
		p   *Package
		opt Options
		err string // "" for none
	}{
		{users, Options{}, ""},
		{users, Options{Out: "internal/usersfero"}, ""},
		{decl, Options{Out: "gen", Stub: "../../impl/impl.go"}, ""},
		// The declarations could not import the generated package.
		{users, Options{Out: "../server/internal/usersfero", NoStub: true},
			"the generated package example.com/shop/server/internal/usersfero is internal to example.com/shop/server: " +
				"the declaration package example.com/shop/users, and the code that uses it, could not import it"},
		// The generated package could not import the declarations.
		{decl, Options{Out: "../../../b/gen", NoStub: true},
			"the generated package example.com/shop/b/gen could not import example.com/shop/a/internal/decl, which is internal to example.com/shop/a"},
		// The stub could not import the generated package.
		{users, Options{Out: "internal/usersfero", Stub: "../cmd/server/impl.go"},
			"the stub's package example.com/shop/cmd/server could not import example.com/shop/users/internal/usersfero, which is internal to example.com/shop/users"},
		// Cycles: the declarations import the package, directly or not.
		{users, Options{Out: "api", NoStub: true},
			"import cycle: the generated package example.com/shop/users/api would import example.com/shop/users, which imports it"},
		{users, Options{Out: "../shared", NoStub: true},
			"import cycle: the generated package example.com/shop/shared would import example.com/shop/users, which imports it (through example.com/shop/util)"},
		{users, Options{Stub: "../model/impl.go"},
			"import cycle: the stub's package example.com/shop/model would import example.com/shop/users, which imports it"},
	} {
		_, err := Generate(c.p, c.opt)
		if c.err == "" {
			assert.NoError(t, err, "%+v", c.opt)
		} else if assert.Error(t, err, "%+v", c.opt) {
			assert.Contains(t, err.Error(), c.err, "%+v", c.opt)
		}
	}
}

// writeFiles writes files, by path relative to dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		path := filepath.Join(dir, filepath.FromSlash(name))
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	}
}

// TestConcurrent: //fero:concurrent marks its methods, and only they
// reach fero.Concurrent in the Register function; a file without one
// renders as before the directive existed (the golden cases other than
// ledger are byte for byte what ferogen made then), needing no newer
// pkg/fero.
func TestConcurrent(t *testing.T) {
	pkgs, err := Load(testContext(t), "testdata/ok/ledger")
	require.NoError(t, err)
	p := pkgs[0]
	require.NoError(t, p.Err)
	marked := map[string]bool{}
	for _, m := range p.Resources[0].Methods {
		marked[m.Name] = m.Concurrent
	}
	assert.Equal(t, map[string]bool{"Balance": true, "Deposit": false, "Audit": true, "History": false}, marked)
	out, err := Generate(p, Options{NoStub: true})
	require.NoError(t, err)
	src := string(out.Generated.Content)
	assert.Contains(t, src, "const _ = fero.SupportPackageIsVersion5\n")
	assert.Contains(t, src, "\t\tfero.Concurrent(LedgerBalanceVerb, LedgerAuditVerb),\n")
	assert.Contains(t, src, "func RegisterVault(impl ledger.Vault) fero.NodeOption {\n\treturn fero.WithHandler(VaultHandler(impl, nil))\n}\n")

	for _, m := range p.Resources[0].Methods { // p is this test's own load
		m.Concurrent = false
	}
	out, err = Generate(p, Options{NoStub: true})
	require.NoError(t, err)
	src = string(out.Generated.Content)
	assert.Contains(t, src, "const _ = fero.SupportPackageIsVersion5\n")
	assert.NotContains(t, src, "fero.Options(")
	assert.NotContains(t, src, "fero.Concurrent(")
	assert.NotContains(t, src, "concurrent")
	assert.Contains(t, src, "func RegisterLedger(impl ledger.Ledger) fero.NodeOption {\n\treturn fero.WithHandler(LedgerHandler(impl, nil))\n}\n")
}

// VerbOf: the verb a method without a //fero:verb directive gets, from
// its name split into words. Frozen: verbs go on the wire.

package ferogen

import (
	"strings"
	"unicode/utf8"
)

// VerbOf is the verb of a method without a //fero:verb directive: its
// name in upper case, words separated by '_'. Verbs go on the wire, so
// this rule, and its lists of words, never change; docs/ferogen.md states
// it, and TestVerbOf holds examples.
//
// An underscore is kept, and ends a word. Otherwise a word starts at an
// upper-case letter after a lower-case one (GetUser: GET_USER), and at the
// last capital of a run of them followed by lower case (HTTPProxy:
// HTTP_PROXY), except for a lone s after the run, which is its plural
// (GetURLs: GET_URLS, IDsByName: IDS_BY_NAME). A run that is wholly
// initialisms of the list, taken longest first from the left, is split
// into them (MyHTTPAPI: MY_HTTP_API). A mixed-case word of the list is
// one word where a word starts (OAuth2Token: OAUTH2_TOKEN). Digits end
// the word they follow (V2Login: V2_LOGIN). A name not in ASCII makes a
// verb that is not, which the reader refuses.
func VerbOf(method string) string {
	parts := strings.Split(method, "_")
	for i, p := range parts {
		parts[i] = strings.ToUpper(strings.Join(words(p), "_"))
	}
	return strings.Join(parts, "_")
}

// initialisms are golint's list of common initialisms, as of its last
// release; mixedCase the words, written in mixed case, that are one word
// all the same. Both are frozen: see VerbOf.
var (
	initialisms = []string{"ACL", "API", "ASCII", "CPU", "CSS", "DNS", "EOF", "GUID", "HTML", "HTTP", "HTTPS",
		"ID", "IP", "JSON", "LHS", "QPS", "RAM", "RHS", "RPC", "SLA", "SMTP", "SQL", "SSH", "TCP", "TLS", "TTL",
		"UDP", "UI", "UID", "UUID", "URI", "URL", "UTF8", "VM", "XML", "XMPP", "XSRF", "XSS"}
	mixedCase = []string{"OAuth", "IPv4", "IPv6"}
)

// words splits a name without underscores into its words (see VerbOf).
// Letters other than ASCII count as lower case.
func words(s string) []string {
	var out []string
	var digits string // leading digits, for the word after them
	for i := 0; i < len(s); {
		var w []string // the word, or the words of a run of capitals
		switch j := i + upperRun(s[i:]); {
		case isDigit(s[i]):
			j = i + digitRun(s[i:])
			digits, i = s[i:j], j
			continue
		case mixedAt(s[i:]) != "":
			w = []string{mixedAt(s[i:])}
		case j > i+1 && j < len(s) && s[j] == 's' && (j+1 == len(s) || !isLower(s[j+1])):
			w = splitRun(s[i:j]) // the run's plural
			w[len(w)-1] += "s"
		case j > i+1 && j < len(s) && isLower(s[j]):
			w = splitRun(s[i : j-1]) // the last capital starts the next word
		case j > i+1 || j == len(s) || !isLower(s[j]):
			w = splitRun(s[i:j])
		default: // a capital or none, then lower case
			j = max(j, i+1)
			for j < len(s) && isLower(s[j]) {
				j++
			}
			w = []string{s[i:j]}
		}
		for _, x := range w {
			i += len(x)
		}
		n := digitRun(s[i:])
		w[0] = digits + w[0]
		w[len(w)-1] += s[i : i+n]
		digits, i = "", i+n
		out = append(out, w...)
	}
	if digits != "" {
		out = append(out, digits)
	}
	return out
}

// splitRun splits a run of capitals into the initialisms it is made of,
// taking the longest at each step, or returns it whole if that fails.
func splitRun(run string) []string {
	var out []string
	for rest := run; rest != ""; {
		longest := ""
		for _, in := range initialisms {
			if len(in) > len(longest) && strings.HasPrefix(rest, in) {
				longest = in
			}
		}
		if longest == "" {
			return []string{run}
		}
		out = append(out, longest)
		rest = rest[len(longest):]
	}
	return out
}

// mixedAt returns the word of mixedCase s starts with, if no lower-case
// letter follows it.
func mixedAt(s string) string {
	for _, w := range mixedCase {
		if strings.HasPrefix(s, w) && (len(s) == len(w) || !isLower(s[len(w)])) {
			return w
		}
	}
	return ""
}

func upperRun(s string) int {
	n := 0
	for n < len(s) && 'A' <= s[n] && s[n] <= 'Z' {
		n++
	}
	return n
}

func digitRun(s string) int {
	n := 0
	for n < len(s) && isDigit(s[n]) {
		n++
	}
	return n
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isLower reports a lower-case ASCII letter, or a byte of a letter
// beyond ASCII.
func isLower(c byte) bool { return 'a' <= c && c <= 'z' || c >= utf8.RuneSelf }

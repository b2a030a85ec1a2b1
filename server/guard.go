package server

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// The guard keeps web pages out: a page the user happens to visit can send
// requests to the server (a POST with Content-Type text/plain needs no
// preflight) and, by rebinding its own name to 127.0.0.1, read the replies
// (DNS rebinding). Every request passes two checks before anything else,
// the API key included:
//
//   - Host. A request whose Host is not loopback (localhost, 127.0.0.0/8,
//     [::1], any port), the address it arrived at, or a name in
//     Config.AllowedHosts is refused with 403: a rebound page's requests
//     carry the page's own name. With an API key, a request that arrived on
//     an address other than loopback skips this check, as Ollama's does when
//     it listens beyond loopback: the machine is then reached by names
//     kvscope cannot know (its LAN address, mDNS and DNS names, a proxy's),
//     and a rebound page does not have the key, which browsers never add on
//     their own.
//   - Origin. Browsers send Origin on cross-origin requests (and on every
//     POST); curl, the SDKs and servers' own calls send none. A request with
//     an Origin not in Config.AllowedOrigins is refused with 403 whatever its
//     method and content type, so the engine never sees it. An allowed
//     origin gets CORS headers on every reply and its preflights are
//     answered, so a browser client the user chose works.

// typePermission is the error type of a request refused for where it
// comes from (OpenAI's PermissionDeniedError is a 403).
const typePermission = "permission_error"

// corsMaxAge is how long, in seconds, a browser may keep a preflight's
// answer (Chromium caps it at 7200).
const corsMaxAge = "7200"

// ErrWildcardNeedsKey is CheckOrigins' error for "*" without an API key:
// every web page could then call the server.
var ErrWildcardNeedsKey = errors.New(`"*" lets every web page call the server: it needs an API key`)

// CheckOrigins refuses an allowed origin that is not scheme://host[:port]
// (such as http://localhost:3000 or chrome-extension://ID), "null" (any
// sandboxed page sends it), and "*" when hasKey is false (an error
// wrapping ErrWildcardNeedsKey). It is the rule for every way of starting a
// server: kvscope serve's --allow-origin and the app's field.
func CheckOrigins(origins []string, hasKey bool) error {
	_, err := originSet(origins, hasKey)
	return err
}

// CheckHosts refuses an allowed host that is not a bare name or address
// (no scheme, port or path).
func CheckHosts(hosts []string) error {
	_, err := hostSet(hosts)
	return err
}

// originSet returns the allowed origins, normalised, as a set ("*" stays
// as it is).
func originSet(origins []string, hasKey bool) (map[string]bool, error) {
	set := make(map[string]bool, len(origins))
	for _, o := range origins {
		o = strings.TrimSpace(o)
		if o == "*" {
			if !hasKey {
				return nil, ErrWildcardNeedsKey
			}
			set[o] = true
			continue
		}
		n, err := normOrigin(o)
		if err != nil {
			return nil, err
		}
		set[n] = true
	}
	return set, nil
}

// normOrigin returns origin as browsers send it: the scheme and host in
// lower case, without http's port 80 or https's 443, without a path.
func normOrigin(origin string) (string, error) {
	if strings.EqualFold(origin, "null") {
		return "", fmt.Errorf("the origin %q is sent by every sandboxed page and file, so it cannot be allowed", origin)
	}
	u, err := url.Parse(origin)
	if err != nil || u.Scheme == "" || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", fmt.Errorf("the origin %q is not scheme://host[:port], such as http://localhost:3000", origin)
	}
	scheme, host := strings.ToLower(u.Scheme), strings.ToLower(u.Host)
	if p := u.Port(); (scheme == "http" && p == "80") || (scheme == "https" && p == "443") {
		host = strings.TrimSuffix(host, ":"+p)
	}
	return scheme + "://" + host, nil
}

// hostSet returns the allowed hosts, in lower case, as a set.
func hostSet(hosts []string) (map[string]bool, error) {
	set := make(map[string]bool, len(hosts))
	for _, h := range hosts {
		h = strings.ToLower(strings.TrimSpace(h))
		bare := strings.TrimSuffix(strings.TrimPrefix(h, "["), "]")
		if _, err := netip.ParseAddr(bare); err == nil {
			set[bare] = true
			continue
		}
		if !validName(h) {
			return nil, fmt.Errorf("the host %q is not a name or address without a port, such as kvscope.lan", h)
		}
		set[h] = true
	}
	return set, nil
}

// validName reports whether h is a DNS name: dot-separated labels of
// letters, digits, '-' and '_'.
func validName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(h, "."), ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// guard applies the Host and Origin checks to r (see the comment at the
// top of this file). It answers r itself, and returns false, when r is
// refused or is an allowed origin's preflight; otherwise it has set r's
// CORS headers and returns true.
func (s *Server) guard(w http.ResponseWriter, r *http.Request) bool {
	h := w.Header()
	h.Add("Vary", "Origin") // every reply depends on it: refused or not
	if host, ok := s.hostAllowed(r); !ok {
		s.metrics.refused.WithLabelValues("host").Inc()
		s.refused.Add(1)
		writeError(w, &apiError{status: http.StatusForbidden, Type: typePermission, Code: strp("host_not_allowed"),
			Message: fmt.Sprintf("the Host %q is not this machine: only Host localhost, 127.0.0.1, [::1] or the address the request came to is answered, "+
				"so that a web page cannot reach the server through a name it rebinds to this machine; to answer this name, start kvscope serve with --allow-host %s", r.Host, hostOnly(host))})
		return false
	}
	origin := r.Header.Get("Origin")
	if origin == "" && len(r.Header.Values("Origin")) == 0 {
		return true // not a browser's cross-origin request: curl, the SDKs
	}
	n, err := normOrigin(origin)
	if !s.origins["*"] && (err != nil || !s.origins[n]) {
		s.metrics.refused.WithLabelValues("origin").Inc()
		s.refused.Add(1)
		writeError(w, &apiError{status: http.StatusForbidden, Type: typePermission, Code: strp("origin_not_allowed"),
			Message: fmt.Sprintf("the Origin %q is not allowed: requests from web pages are refused unless their origin is allowed, "+
				"with kvscope serve --allow-origin ORIGIN (repeatable) or the app's Allowed origins field", origin)})
		return false
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Expose-Headers", "Retry-After, WWW-Authenticate")
	if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
		h.Add("Vary", "Access-Control-Request-Method")
		h.Add("Vary", "Access-Control-Request-Headers")
		h.Set("Access-Control-Allow-Methods", "GET, POST, OPTIONS")
		h.Set("Access-Control-Allow-Headers", allowHeaders(r.Header.Values("Access-Control-Request-Headers")))
		h.Set("Access-Control-Max-Age", corsMaxAge)
		if r.Header.Get("Access-Control-Request-Private-Network") == "true" {
			h.Set("Access-Control-Allow-Private-Network", "true") // Chromium's Private Network Access
		}
		w.WriteHeader(http.StatusNoContent)
		return false
	}
	return true
}

// hostAllowed reports whether r's Host passes, and returns the host
// without its port.
func (s *Server) hostAllowed(r *http.Request) (string, bool) {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.ToLower(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"))
	if IsLoopback(host) || s.hosts[host] {
		return host, true
	}
	local, ok := localAddr(r)
	if !ok {
		return host, false
	}
	if s.hasKey && !local.IsLoopback() {
		return host, true // the key guards it (see the top of this file)
	}
	ip, err := netip.ParseAddr(host)
	return host, err == nil && ip.Unmap() == local
}

// localAddr returns the address r arrived at, when its server says.
func localAddr(r *http.Request) (netip.Addr, bool) {
	a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return netip.Addr{}, false
	}
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return netip.Addr{}, false
	}
	return ap.Addr().Unmap(), true
}

// hostOnly is host as --allow-host takes it (NAME when host is empty or
// not one).
func hostOnly(host string) string {
	if _, err := hostSet([]string{host}); err != nil {
		return "NAME"
	}
	return host
}

// allowHeaders is a preflight's Access-Control-Allow-Headers: the
// headers the API reads, and those the page asks for (an allowed origin is
// trusted; the openai SDK sends its own X-Stainless-* headers), each a
// valid header name.
func allowHeaders(requested []string) string {
	out := []string{"Authorization", "Content-Type"}
	seen := map[string]bool{"authorization": true, "content-type": true}
	for _, v := range requested {
		for _, name := range strings.Split(v, ",") {
			name = strings.TrimSpace(name)
			if k := strings.ToLower(name); name != "" && !seen[k] && validToken(name) {
				seen[k] = true
				out = append(out, name)
			}
		}
	}
	return strings.Join(out, ", ")
}

// validToken reports whether name is an HTTP token (RFC 9110).
func validToken(name string) bool {
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	return name != ""
}

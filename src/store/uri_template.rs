//! Matching a URI against an RFC 6570 URI template (levels 1–3): is the URI one of the
//! template's expansions? Used to route a read of a templated resource to its server.
//!
//! The common Rust crates for RFC 6570 expand templates; none matches a URI against one, so
//! this is our own. A URI matches when some assignment of values (each variable defined or
//! not, as RFC 6570 allows) expands the template to exactly that URI. Query expressions
//! (`{?a,b}`, `{&a}`) also accept their pairs in any order, as clients write them.

/// URIs longer than this never match.
pub const MAX_MATCHED_URI_BYTES: usize = 4096;
/// The bytes one match may examine; templates of many adjacent expressions could otherwise
/// make matching cubic in the URI's length. Past it, the URI does not match.
pub const MATCH_BUDGET_BYTES: usize = 4_000_000;

/// A parsed URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Literal(String),
    Expression {
        operator: Operator,
        names: Vec<String>,
    },
}

/// The expression operators of levels 1–3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    /// `{var}`: unreserved characters, values joined by `,`.
    Simple,
    /// `{+var}`: reserved characters allowed too.
    Reserved,
    /// `{#var}`: `#`, then as reserved.
    Fragment,
    /// `{.var}`: each value after a `.`.
    Label,
    /// `{/var}`: each value after a `/`.
    Path,
    /// `{;var}`: each `;name=value` (or `;name` when empty).
    PathParameter,
    /// `{?a,b}`: `?name=value&name=value`.
    Query,
    /// `{&a}`: `&name=value`.
    QueryContinuation,
}

/// Why a template does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed expression at byte {0}")]
    Unclosed(usize),
    #[error("empty expression at byte {0}")]
    Empty(usize),
    #[error("invalid variable name {0:?}")]
    InvalidName(String),
}

impl UriTemplate {
    pub fn parse(template: &str) -> Result<UriTemplate, TemplateError> {
        let mut parts = Vec::new();
        let mut rest = template;
        let mut offset = 0;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                parts.push(Part::Literal(rest[..open].to_string()));
            }
            let close = rest[open..]
                .find('}')
                .ok_or(TemplateError::Unclosed(offset + open))?
                + open;
            let body = &rest[open + 1..close];
            parts.push(parse_expression(body, offset + open)?);
            offset += close + 1;
            rest = &rest[close + 1..];
        }
        if !rest.is_empty() {
            parts.push(Part::Literal(rest.to_string()));
        }
        Ok(UriTemplate { parts })
    }

    /// The literal text before the first expression: every match starts with it.
    pub fn literal_prefix(&self) -> &str {
        match self.parts.first() {
            Some(Part::Literal(text)) => text,
            _ => "",
        }
    }

    /// Whether `uri` is an expansion of this template.
    pub fn matches(&self, uri: &str) -> bool {
        if uri.len() > MAX_MATCHED_URI_BYTES || !uri.starts_with(self.literal_prefix()) {
            return false;
        }
        // Positions already known not to lead to a match, per part: the memo keeps
        // backtracking over adjacent expressions polynomial.
        let mut search = Search {
            uri,
            dead: vec![vec![false; uri.len() + 1]; self.parts.len()],
            budget: MATCH_BUDGET_BYTES,
        };
        self.match_from(0, 0, &mut search)
    }

    fn match_from(&self, index: usize, at: usize, search: &mut Search) -> bool {
        let uri = search.uri;
        let Some(part) = self.parts.get(index) else {
            return at == uri.len();
        };
        if search.dead[index][at] {
            return false;
        }
        let found = match part {
            Part::Literal(text) => {
                uri[at..].starts_with(text.as_str())
                    && self.match_from(index + 1, at + text.len(), search)
            }
            Part::Expression { operator, names } => {
                let longest = extent(*operator, &uri[at..]);
                // What follows the expression decides where it may end: the end of the URI,
                // or where the next literal occurs; only adjacent expressions try every end.
                let next_literal = match self.parts.get(index + 1) {
                    None => None,
                    Some(Part::Literal(text)) => Some(text.as_str()),
                    Some(Part::Expression { .. }) => Some(""),
                };
                // Longest first: a greedy match is the likely one.
                (0..=longest).rev().any(|length| {
                    let end = at + length;
                    if !uri.is_char_boundary(end) {
                        return false;
                    }
                    let placed = match next_literal {
                        None => end == uri.len(),
                        Some(text) => uri[end..].starts_with(text),
                    };
                    if !placed || search.budget < length {
                        return false;
                    }
                    search.budget -= length;
                    is_expansion(*operator, names, &uri[at..end])
                        && self.match_from(index + 1, end, search)
                })
            }
        };
        if !found {
            search.dead[index][at] = true;
        }
        found
    }
}

/// The state of one match: positions known to fail, per part, and the bytes left to examine.
struct Search<'a> {
    uri: &'a str,
    dead: Vec<Vec<bool>>,
    budget: usize,
}

fn parse_expression(body: &str, at: usize) -> Result<Part, TemplateError> {
    let (operator, list) = match body.chars().next() {
        None => return Err(TemplateError::Empty(at)),
        Some('+') => (Operator::Reserved, &body[1..]),
        Some('#') => (Operator::Fragment, &body[1..]),
        Some('.') => (Operator::Label, &body[1..]),
        Some('/') => (Operator::Path, &body[1..]),
        Some(';') => (Operator::PathParameter, &body[1..]),
        Some('?') => (Operator::Query, &body[1..]),
        Some('&') => (Operator::QueryContinuation, &body[1..]),
        Some(_) => (Operator::Simple, body),
    };
    let mut names = Vec::new();
    for spec in list.split(',') {
        // Level 4 modifiers (`:3`, `*`) are accepted and ignored: they only shorten or
        // split values, and our matching already allows any value.
        let name = spec
            .split(':')
            .next()
            .unwrap_or_default()
            .trim_end_matches('*');
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.' || c == '%');
        if !valid {
            return Err(TemplateError::InvalidName(spec.to_string()));
        }
        names.push(name.to_string());
    }
    if names.is_empty() {
        return Err(TemplateError::Empty(at));
    }
    Ok(Part::Expression { operator, names })
}

fn is_unreserved(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | '~')
}

fn is_reserved(c: char) -> bool {
    matches!(
        c,
        ':' | '/'
            | '?'
            | '#'
            | '['
            | ']'
            | '@'
            | '!'
            | '$'
            | '&'
            | '\''
            | '('
            | ')'
            | '*'
            | '+'
            | ','
            | ';'
            | '='
    )
}

/// How far, in bytes, an expansion of `operator` could reach into `text`: the run of
/// characters any of its expansions may contain.
fn extent(operator: Operator, text: &str) -> usize {
    let allowed = |c: char| match operator {
        Operator::Reserved | Operator::Fragment => {
            is_unreserved(c) || is_reserved(c) || c == '%' || !c.is_ascii()
        }
        Operator::Simple => is_unreserved(c) || c == '%' || c == ',',
        Operator::Label | Operator::Path => is_unreserved(c) || c == '%' || c == ',' || c == '/',
        Operator::PathParameter => is_unreserved(c) || matches!(c, '%' | ',' | ';' | '='),
        Operator::Query | Operator::QueryContinuation => {
            is_unreserved(c) || matches!(c, '%' | ',' | '&' | '=' | '?')
        }
    };
    text.char_indices()
        .find(|(_, c)| !allowed(*c))
        .map(|(index, _)| index)
        .unwrap_or(text.len())
}

/// A value of unreserved characters and `%XX` escapes (commas join a list's items).
fn is_value(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut index = 0;
    while index < bytes.len() {
        let byte = bytes[index];
        if byte == b'%' {
            let escape = bytes.get(index + 1..index + 3);
            if !escape.is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit)) {
                return false;
            }
            index += 3;
        } else if is_unreserved(char::from(byte)) || byte == b',' {
            index += 1;
        } else {
            return false;
        }
    }
    true
}

/// Whether `text` is an expansion of one expression for some values of `names`.
fn is_expansion(operator: Operator, names: &[String], text: &str) -> bool {
    match operator {
        Operator::Simple => is_value(text),
        // `extent` already kept to the characters allowed; escapes must still be whole.
        Operator::Reserved => percent_escapes_whole(text),
        Operator::Fragment => {
            text.is_empty() || (text.starts_with('#') && percent_escapes_whole(&text[1..]))
        }
        Operator::Label => prefixed_values(text, '.', names.len()),
        Operator::Path => prefixed_values(text, '/', names.len()),
        Operator::PathParameter => {
            text.is_empty() || (text.starts_with(';') && named_pairs(&text[1..], ';', names, true))
        }
        Operator::Query => {
            text.is_empty() || (text.starts_with('?') && named_pairs(&text[1..], '&', names, false))
        }
        Operator::QueryContinuation => {
            text.is_empty() || (text.starts_with('&') && named_pairs(&text[1..], '&', names, false))
        }
    }
}

fn percent_escapes_whole(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.iter().enumerate().all(|(index, byte)| {
        *byte != b'%'
            || bytes
                .get(index + 1..index + 3)
                .is_some_and(|pair| pair.iter().all(u8::is_ascii_hexdigit))
    })
}

/// Empty, or up to `count` values each after `separator` (a list value may hold commas).
fn prefixed_values(text: &str, separator: char, count: usize) -> bool {
    if text.is_empty() {
        return true;
    }
    let Some(rest) = text.strip_prefix(separator) else {
        return false;
    };
    let values: Vec<&str> = rest.split(separator).collect();
    values.len() <= count && values.iter().all(|value| is_value(value))
}

/// `name=value` pairs joined by `separator`, each name one of `names` and at most once.
/// With `bare_name`, a pair may be a name alone (`;x` for an empty value).
fn named_pairs(text: &str, separator: char, names: &[String], bare_name: bool) -> bool {
    let mut seen: Vec<&str> = Vec::new();
    text.split(separator).all(|pair| {
        let (name, value) = match pair.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None if bare_name => (pair, None),
            None => return false,
        };
        let known = names.iter().any(|known| known == name) && !seen.contains(&name);
        seen.push(name);
        known && value.map_or(true, is_value)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(template: &str, uri: &str) -> bool {
        UriTemplate::parse(template)
            .unwrap_or_else(|error| panic!("{template}: {error}"))
            .matches(uri)
    }

    #[test]
    fn simple_expressions_match_unreserved_values() {
        assert!(matches("fai://modules/{id}", "fai://modules/F1"));
        assert!(matches(
            "fixture://docs/docs/{id}.md",
            "fixture://docs/docs/000001.md"
        ));
        assert!(matches("x://{a}", "x://caf%C3%A9"));
        assert!(matches("x://{x,y}", "x://1024,768"));
        assert!(!matches("fai://modules/{id}", "fai://modules/F1/extra"));
        assert!(!matches("fai://modules/{id}", "fai://other/F1"));
        assert!(!matches("x://{a}", "x://a%2"));
        assert!(!matches("x://{a}", "x://a?b"));
    }

    #[test]
    fn reserved_and_fragment_expressions_take_reserved_characters() {
        assert!(matches("file:///{+path}", "file:///usr/share/doc/x.txt"));
        assert!(!matches("file:///{path}", "file:///usr/share"));
        assert!(matches("x://page{#section}", "x://page#intro/part,2"));
        assert!(matches("x://page{#section}", "x://page"));
        assert!(!matches("x://page{#section}", "x://page/intro"));
    }

    #[test]
    fn label_and_path_expressions_take_their_prefixes() {
        assert!(matches("x://host/file{.ext}", "x://host/file.md"));
        assert!(matches("x://host/file{.ext}", "x://host/file"));
        assert!(matches("x://host{/a,b}", "x://host/one/two"));
        assert!(matches("x://host{/a,b}", "x://host/one"));
        assert!(!matches("x://host{/a,b}", "x://host/one/two/three"));
        assert!(!matches("x://host{/a}", "x://host-one"));
        assert!(matches("x://m{;x,y}", "x://m;x=1;y"));
        assert!(!matches("x://m{;x}", "x://m;z=1"));
    }

    #[test]
    fn query_expressions_take_known_names_in_any_order() {
        let template = "fixture://docs/search{?q,limit}";
        assert!(matches(template, "fixture://docs/search"));
        assert!(matches(template, "fixture://docs/search?q=rust"));
        assert!(matches(template, "fixture://docs/search?q=rust&limit=5"));
        assert!(matches(template, "fixture://docs/search?limit=5&q=rust"));
        assert!(!matches(template, "fixture://docs/search?other=1"));
        assert!(!matches(template, "fixture://docs/search?q=1&q=2"));
        assert!(!matches(template, "fixture://docs/search?q"));
        assert!(matches("x://s?fixed=1{&a}", "x://s?fixed=1&a=2"));
        assert!(matches("x://s?fixed=1{&a}", "x://s?fixed=1"));
    }

    #[test]
    fn several_expressions_backtrack_to_a_match() {
        assert!(matches("x://{a}{b}/{c}", "x://ab/c"));
        assert!(matches("x://{a}-{b}", "x://left-right"));
        assert!(matches("x://{+base}/docs{/id}{?v}", "x://a/b/docs/7?v=2"));
        assert!(!matches("x://{a}-{b}", "x://left_right"));
        // Many adjacent expressions over a long URI finish quickly (the memo).
        let template = "x://".to_string() + &"{a}".repeat(30) + "!";
        let uri = "x://".to_string() + &"a".repeat(3000);
        assert!(!matches(&template, &uri));
    }

    #[test]
    fn bad_templates_are_errors_and_long_uris_never_match() {
        assert_eq!(
            UriTemplate::parse("x://{a"),
            Err(TemplateError::Unclosed(4))
        );
        assert_eq!(UriTemplate::parse("x://{}"), Err(TemplateError::Empty(4)));
        assert!(UriTemplate::parse("x://{a b}").is_err());
        assert!(matches("x://{id:3}", "x://abc"));
        let long = "x://".to_string() + &"a".repeat(MAX_MATCHED_URI_BYTES);
        assert!(!matches("x://{+rest}", &long));
        assert_eq!(
            UriTemplate::parse("x://a/{b}")
                .expect("parses")
                .literal_prefix(),
            "x://a/"
        );
    }
}

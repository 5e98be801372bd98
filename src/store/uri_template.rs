//! Matching a URI against an RFC 6570 URI template (levels 1–3): is the URI one of the
//! template's expansions? Used to route a read of a templated resource to its server.
//!
//! The common Rust crates for RFC 6570 expand templates; none matches a URI against one, so
//! this is our own. A URI matches when some assignment of values (each variable defined or
//! not, as RFC 6570 allows) expands the template to exactly that URI. Query expressions
//! (`{?a,b}`, `{&a}`) also accept their pairs in any order, as clients write them.
//!
//! Templates come from servers, so matching is bounded whatever the template: no recursion
//! (the parts are walked in a loop, keeping the set of URI positions each part may start at,
//! as an NFA simulation keeps its states), memory of a few bit sets the size of the URI, and
//! every step paid from a `MatchBudget` the caller gives (a read gives each server one).

/// URIs longer than this never match.
pub const MAX_MATCHED_URI_BYTES: usize = 4096;
/// The steps (URI bytes examined, template bytes parsed, names compared) one server's
/// templates may spend on matching one URI; past it, its remaining templates do not match. A
/// template within the default bounds needs a small fraction of it, even on the longest URI.
pub const MATCH_BUDGET_STEPS: u64 = 4_000_000;
pub use crate::config::{MAX_TEMPLATE_BYTES_CEILING, MAX_TEMPLATE_EXPRESSIONS_CEILING};

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
    #[error("a template of {bytes} bytes is longer than {max} bytes (max_template_bytes)")]
    TooLong { bytes: usize, max: usize },
    #[error("a template of more than {max} expressions (max_template_expressions)")]
    TooManyExpressions { max: usize },
}

/// What one server may spend on matching one URI against its templates; each step of a
/// match is paid from it, and a match that cannot pay is not a match.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchBudget {
    steps_left: u64,
}

impl MatchBudget {
    pub fn new(steps: u64) -> MatchBudget {
        MatchBudget { steps_left: steps }
    }

    /// Whether nothing is left: further matches fail at once.
    pub fn is_spent(&self) -> bool {
        self.steps_left == 0
    }

    /// Pays `steps`, or empties the budget and says no.
    pub fn pay(&mut self, steps: usize) -> bool {
        let steps = steps as u64;
        if self.steps_left < steps {
            self.steps_left = 0;
            return false;
        }
        self.steps_left -= steps;
        true
    }
}

impl Default for MatchBudget {
    fn default() -> Self {
        MatchBudget::new(MATCH_BUDGET_STEPS)
    }
}

impl UriTemplate {
    /// Parses a template within the ceilings (`MAX_TEMPLATE_BYTES_CEILING`,
    /// `MAX_TEMPLATE_EXPRESSIONS_CEILING`).
    pub fn parse(template: &str) -> Result<UriTemplate, TemplateError> {
        UriTemplate::parse_within(
            template,
            MAX_TEMPLATE_BYTES_CEILING,
            MAX_TEMPLATE_EXPRESSIONS_CEILING,
        )
    }

    /// Parses a template of at most `max_bytes` bytes and `max_expressions` expressions.
    pub fn parse_within(
        template: &str,
        max_bytes: usize,
        max_expressions: usize,
    ) -> Result<UriTemplate, TemplateError> {
        if template.len() > max_bytes {
            return Err(TemplateError::TooLong {
                bytes: template.len(),
                max: max_bytes,
            });
        }
        let mut parts = Vec::new();
        let mut expressions = 0usize;
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
            expressions += 1;
            if expressions > max_expressions {
                return Err(TemplateError::TooManyExpressions {
                    max: max_expressions,
                });
            }
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

    /// Whether `uri` is an expansion of this template, within a budget of its own.
    #[cfg(test)]
    pub fn matches(&self, uri: &str) -> bool {
        self.matches_within(uri, &mut MatchBudget::default())
    }

    /// Whether `uri` is an expansion of this template; every step is paid from `budget`, and
    /// a match it cannot pay for fails (and leaves it spent).
    ///
    /// The parts are taken in order, keeping the set of URI positions the next part may start
    /// at (a bit set): each part turns it into the set of positions where it may end, in one
    /// pass over the URI for most operators. Time follows parts × URI length (paid from the
    /// budget); memory is a few sets of the URI's size, whatever the template.
    pub fn matches_within(&self, uri: &str, budget: &mut MatchBudget) -> bool {
        if uri.len() > MAX_MATCHED_URI_BYTES || !uri.starts_with(self.literal_prefix()) {
            return false;
        }
        let bytes = uri.as_bytes();
        let mut starts = Positions::new(bytes.len());
        let mut ends = Positions::new(bytes.len());
        let mut scratch = Scratch::new(bytes.len());
        starts.insert(0);
        for part in &self.parts {
            if starts.is_empty() || !budget.pay(ends.words.len()) {
                return false;
            }
            ends.clear();
            let paid = match part {
                Part::Literal(text) => {
                    literal_ends(bytes, text.as_bytes(), &starts, &mut ends, budget)
                }
                Part::Expression { operator, names } => expression_ends(
                    *operator,
                    names,
                    bytes,
                    &starts,
                    &mut ends,
                    &mut scratch,
                    budget,
                ),
            };
            if !paid {
                return false;
            }
            std::mem::swap(&mut starts, &mut ends);
        }
        starts.contains(bytes.len())
    }
}

/// A set of positions in a URI (0 to its length), one bit each.
#[derive(Debug)]
struct Positions {
    words: Vec<u64>,
}

impl Positions {
    fn new(length: usize) -> Positions {
        Positions {
            words: vec![0; length / 64 + 1],
        }
    }

    fn clear(&mut self) {
        self.words.iter_mut().for_each(|word| *word = 0);
    }

    fn insert(&mut self, position: usize) {
        self.words[position / 64] |= 1 << (position % 64);
    }

    fn remove(&mut self, position: usize) {
        self.words[position / 64] &= !(1 << (position % 64));
    }

    fn contains(&self, position: usize) -> bool {
        self.words
            .get(position / 64)
            .is_some_and(|word| word & (1 << (position % 64)) != 0)
    }

    fn is_empty(&self) -> bool {
        self.words.iter().all(|word| *word == 0)
    }

    fn first(&self) -> Option<usize> {
        self.iter().next()
    }

    /// The positions in increasing order.
    fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().enumerate().flat_map(|(index, word)| {
            let mut bits = *word;
            std::iter::from_fn(move || {
                if bits == 0 {
                    return None;
                }
                let bit = bits.trailing_zeros() as usize;
                bits &= bits - 1;
                Some(index * 64 + bit)
            })
        })
    }
}

/// What some operators need besides the sets: positions after a `#`, the fewest values that
/// reach each position, the names a query expansion has used.
struct Scratch {
    positions: Positions,
    values: Vec<u32>,
    seen: Vec<bool>,
}

impl Scratch {
    fn new(length: usize) -> Scratch {
        Scratch {
            positions: Positions::new(length),
            values: Vec::new(),
            seen: Vec::new(),
        }
    }
}

fn literal_ends(
    bytes: &[u8],
    text: &[u8],
    starts: &Positions,
    ends: &mut Positions,
    budget: &mut MatchBudget,
) -> bool {
    for at in starts.iter() {
        if !budget.pay(text.len().max(1)) {
            return false;
        }
        if bytes[at..].starts_with(text) {
            ends.insert(at + text.len());
        }
    }
    true
}

/// Marks in `ends` every position where an expansion of the expression starting at a position
/// of `starts` may end. Returns false when the budget could not pay.
fn expression_ends(
    operator: Operator,
    names: &[String],
    bytes: &[u8],
    starts: &Positions,
    ends: &mut Positions,
    scratch: &mut Scratch,
    budget: &mut MatchBudget,
) -> bool {
    match operator {
        Operator::Simple => run_of_atoms(bytes, starts, is_value_byte, ends, budget),
        Operator::Reserved => {
            let paid = run_of_atoms(bytes, starts, is_reserved_value_byte, ends, budget);
            keep_char_boundaries(bytes, ends);
            paid
        }
        Operator::Fragment => {
            let after_hash = &mut scratch.positions;
            after_hash.clear();
            for at in starts.iter() {
                if bytes.get(at) == Some(&b'#') {
                    after_hash.insert(at + 1);
                }
            }
            let paid = run_of_atoms(bytes, after_hash, is_reserved_value_byte, ends, budget);
            keep_char_boundaries(bytes, ends);
            // Undefined variables expand to nothing.
            starts.iter().for_each(|at| ends.insert(at));
            paid
        }
        Operator::Label => {
            separated_values(bytes, starts, b'.', names.len(), ends, scratch, budget)
        }
        Operator::Path => separated_values(bytes, starts, b'/', names.len(), ends, scratch, budget),
        Operator::PathParameter => named_pairs(
            bytes, starts, b';', b';', names, true, ends, scratch, budget,
        ),
        Operator::Query => named_pairs(
            bytes, starts, b'?', b'&', names, false, ends, scratch, budget,
        ),
        Operator::QueryContinuation => named_pairs(
            bytes, starts, b'&', b'&', names, false, ends, scratch, budget,
        ),
    }
}

/// Whether `bytes` (three of them) are a `%XX` escape.
fn is_escape(bytes: &[u8]) -> bool {
    bytes.len() == 3
        && bytes[0] == b'%'
        && bytes[1].is_ascii_hexdigit()
        && bytes[2].is_ascii_hexdigit()
}

/// The ends of `(class | %XX)*` from every start, in one pass: a position is reached when it
/// is a start, or a reached position is one class byte or one escape before it.
fn run_of_atoms(
    bytes: &[u8],
    starts: &Positions,
    class: fn(u8) -> bool,
    ends: &mut Positions,
    budget: &mut MatchBudget,
) -> bool {
    let Some(from) = starts.first() else {
        return true;
    };
    if !budget.pay(bytes.len() + 1 - from) {
        return false;
    }
    for at in from..=bytes.len() {
        let reached = starts.contains(at)
            || (at > from && class(bytes[at - 1]) && ends.contains(at - 1))
            || (at >= from + 3 && is_escape(&bytes[at - 3..at]) && ends.contains(at - 3));
        if reached {
            ends.insert(at);
        }
    }
    true
}

/// An expansion never ends inside a character (non-ASCII bytes are taken one at a time).
fn keep_char_boundaries(bytes: &[u8], ends: &mut Positions) {
    let inside: Vec<usize> = ends
        .iter()
        .filter(|at| bytes.get(*at).is_some_and(|byte| byte & 0xC0 == 0x80))
        .collect();
    inside.into_iter().for_each(|at| ends.remove(at));
}

/// The ends of `{.a,b}` and `{/a,b}`: nothing, or up to `count` values each after `separator`
/// (a list value may hold commas). One pass keeping, per position, the fewest values that
/// reach it (fewer is never worse, as values only add up).
fn separated_values(
    bytes: &[u8],
    starts: &Positions,
    separator: u8,
    count: usize,
    ends: &mut Positions,
    scratch: &mut Scratch,
    budget: &mut MatchBudget,
) -> bool {
    const NONE: u32 = u32::MAX;
    let Some(from) = starts.first() else {
        return true;
    };
    if !budget.pay(bytes.len() + 1 - from) {
        return false;
    }
    let count = u32::try_from(count).unwrap_or(u32::MAX - 1);
    let values = &mut scratch.values;
    values.clear();
    values.resize(bytes.len() + 1, NONE);
    for at in from..=bytes.len() {
        let mut fewest = NONE;
        if at > from {
            let byte = bytes[at - 1];
            if byte == separator {
                let before = if starts.contains(at - 1) {
                    0
                } else {
                    values[at - 1]
                };
                if before < count {
                    fewest = before + 1;
                }
            } else if is_value_byte(byte) {
                fewest = values[at - 1];
            }
        }
        if at >= from + 3 && is_escape(&bytes[at - 3..at]) {
            fewest = fewest.min(values[at - 3]);
        }
        values[at] = fewest;
        if fewest != NONE || starts.contains(at) {
            ends.insert(at);
        }
    }
    true
}

/// The ends of `{;a}`, `{?a,b}`, `{&a}`: nothing, or `lead` and then `name=value` pairs joined
/// by `separator`, each name one of `names` and at most once (with `bare_name`, a pair may be
/// a name alone, `;x` for an empty value). Each start that is a `lead` is scanned forward once.
#[allow(clippy::too_many_arguments)]
fn named_pairs(
    bytes: &[u8],
    starts: &Positions,
    lead: u8,
    separator: u8,
    names: &[String],
    bare_name: bool,
    ends: &mut Positions,
    scratch: &mut Scratch,
    budget: &mut MatchBudget,
) -> bool {
    let seen = &mut scratch.seen;
    // Which of `names` the text is, paid for by the names compared.
    let lookup = |text: &[u8], budget: &mut MatchBudget| -> Option<Option<usize>> {
        budget
            .pay(names.len())
            .then(|| names.iter().position(|name| name.as_bytes() == text))
    };
    for start in starts.iter() {
        // Undefined variables expand to nothing.
        ends.insert(start);
        if bytes.get(start) != Some(&lead) {
            continue;
        }
        if !budget.pay(names.len()) {
            return false;
        }
        seen.clear();
        seen.resize(names.len(), false);
        let mut pair_start = start + 1;
        let mut in_value = false;
        let mut at = start + 1;
        loop {
            if !budget.pay(1) {
                return false;
            }
            // Is the text from `start` to `at` a whole expansion?
            let whole = if in_value {
                true
            } else if bare_name && at > pair_start {
                let Some(found) = lookup(&bytes[pair_start..at], budget) else {
                    return false;
                };
                found.is_some_and(|index| !seen[index])
            } else {
                false
            };
            if whole {
                ends.insert(at);
            }
            let Some(&byte) = bytes.get(at) else {
                break;
            };
            if in_value {
                if byte == separator {
                    in_value = false;
                    pair_start = at + 1;
                    at += 1;
                } else if is_escape(bytes.get(at..at + 3).unwrap_or_default()) {
                    at += 3;
                } else if is_value_byte(byte) {
                    at += 1;
                } else {
                    break;
                }
            } else if byte == b'=' || (bare_name && byte == separator) {
                let Some(found) = lookup(&bytes[pair_start..at], budget) else {
                    return false;
                };
                match found {
                    Some(index) if !seen[index] => seen[index] = true,
                    _ => break,
                }
                if byte == b'=' {
                    in_value = true;
                } else {
                    pair_start = at + 1;
                }
                at += 1;
            } else if byte.is_ascii_alphanumeric() || matches!(byte, b'_' | b'.' | b'%') {
                at += 1;
            } else {
                break;
            }
        }
    }
    true
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

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~')
}

fn is_reserved(byte: u8) -> bool {
    matches!(
        byte,
        b':' | b'/'
            | b'?'
            | b'#'
            | b'['
            | b']'
            | b'@'
            | b'!'
            | b'$'
            | b'&'
            | b'\''
            | b'('
            | b')'
            | b'*'
            | b'+'
            | b','
            | b';'
            | b'='
    )
}

/// A byte of a value as `{var}` expands it: unreserved, or a comma joining a list's items
/// (`%XX` escapes are taken whole, apart).
fn is_value_byte(byte: u8) -> bool {
    is_unreserved(byte) || byte == b','
}

/// A byte of a value as `{+var}` and `{#var}` expand it: reserved characters and any
/// non-ASCII character too.
fn is_reserved_value_byte(byte: u8) -> bool {
    is_unreserved(byte) || is_reserved(byte) || !byte.is_ascii()
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
    #[test]
    fn a_hostile_template_costs_a_bounded_match_and_no_stack() {
        // 15,000 adjacent expressions (45 KB): refused by the bounds, and matched without
        // recursion when parsed past them.
        let adjacent = "{a}".repeat(15_000);
        assert_eq!(
            UriTemplate::parse(&adjacent),
            Err(TemplateError::TooManyExpressions {
                max: MAX_TEMPLATE_EXPRESSIONS_CEILING
            })
        );
        let template =
            UriTemplate::parse_within(&adjacent, usize::MAX, usize::MAX).expect("parses");
        let mut budget = MatchBudget::default();
        assert!(!template.matches_within("x://unlisted", &mut budget));
        assert!(template.matches_within("aaaa", &mut MatchBudget::default()));
        // `{a}/` x 200,000 (781 KB) over the longest URI: the budget runs out, nothing else grows.
        let slashes = "{a}/".repeat(200_000);
        assert!(UriTemplate::parse(&slashes).is_err());
        let template = UriTemplate::parse_within(&slashes, usize::MAX, usize::MAX).expect("parses");
        let uri = "a/".repeat(MAX_MATCHED_URI_BYTES / 2);
        let mut budget = MatchBudget::default();
        assert!(!template.matches_within(&uri, &mut budget));
        assert!(budget.is_spent());
        // Within the bounds, the longest URI against many adjacent expressions still matches.
        let template = UriTemplate::parse(&format!("x://{}!", "{a}".repeat(64))).expect("parses");
        let uri = format!("x://{}!", "a".repeat(MAX_MATCHED_URI_BYTES - 5));
        assert!(template.matches(&uri));
    }

    #[test]
    fn the_matcher_agrees_with_a_brute_force_search_on_small_cases() {
        let literals = ["x", "/", ".", "a", "=", "?", "&", ";", "#", "é", "a=", "/b"];
        let operators = ["", "+", "#", ".", "/", ";", "?", "&"];
        let names = ["a", "b", "a,b", "b,a"];
        let alphabet = [
            "a", "b", "/", ".", "=", "?", "&", ";", "#", "%", "4", "1", ",", "é", "x",
        ];
        let mut state = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = |bound: usize| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % bound as u64) as usize
        };
        let mut matched = 0;
        for _ in 0..40_000 {
            let mut template = String::new();
            for _ in 0..next(4) + 1 {
                if next(2) == 0 {
                    template.push_str(literals[next(literals.len())]);
                } else {
                    template.push('{');
                    template.push_str(operators[next(operators.len())]);
                    template.push_str(names[next(names.len())]);
                    template.push('}');
                }
            }
            let mut uri = String::new();
            for _ in 0..next(9) {
                uri.push_str(alphabet[next(alphabet.len())]);
            }
            let parsed = UriTemplate::parse(&template).expect("parses");
            let expected = reference::matches(&parsed.parts, &uri, 0);
            assert_eq!(parsed.matches(&uri), expected, "{template} against {uri:?}");
            matched += usize::from(expected);
        }
        assert!(matched > 1_000, "too few matches to compare: {matched}");
    }

    /// The matcher this file had before: recursive, quadratic, and right. Small cases only.
    mod reference {
        use super::super::{Operator, Part};

        pub fn matches(parts: &[Part], uri: &str, at: usize) -> bool {
            let Some((part, rest)) = parts.split_first() else {
                return at == uri.len();
            };
            match part {
                Part::Literal(text) => {
                    uri[at..].starts_with(text.as_str()) && matches(rest, uri, at + text.len())
                }
                Part::Expression { operator, names } => {
                    let longest = extent(*operator, &uri[at..]);
                    (0..=longest).any(|length| {
                        let end = at + length;
                        uri.is_char_boundary(end)
                            && is_expansion(*operator, names, &uri[at..end])
                            && matches(rest, uri, end)
                    })
                }
            }
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
                Operator::Label | Operator::Path => {
                    is_unreserved(c) || c == '%' || c == ',' || c == '/'
                }
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
                    text.is_empty()
                        || (text.starts_with(';') && named_pairs(&text[1..], ';', names, true))
                }
                Operator::Query => {
                    text.is_empty()
                        || (text.starts_with('?') && named_pairs(&text[1..], '&', names, false))
                }
                Operator::QueryContinuation => {
                    text.is_empty()
                        || (text.starts_with('&') && named_pairs(&text[1..], '&', names, false))
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
    }
}

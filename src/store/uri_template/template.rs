//! `UriTemplate`: an RFC 6570 template parsed once and matched against URIs within a step budget.

use crate::config::MAX_TEMPLATE_BYTES_CEILING;
use crate::config::MAX_TEMPLATE_EXPRESSIONS_CEILING;

/// URIs longer than this never match.
pub const MAX_MATCHED_URI_BYTES: usize = 4096;
/// The steps (URI bytes examined, template bytes parsed, names compared) one server's
/// templates may spend on matching one URI; past it, its remaining templates do not match. A
/// template within the default bounds needs a small fraction of it, even on the longest URI.
pub const MATCH_BUDGET_STEPS: u64 = 4_000_000;

/// A parsed URI template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UriTemplate {
    pub(super) parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Part {
    Literal(String),
    Expression {
        operator: Operator,
        names: Vec<String>,
    },
}

/// The expression operators of levels 1–3.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Operator {
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

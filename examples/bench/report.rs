//! Statistics over samples and the Markdown report every scenario writes its tables into.

/// A set of samples in one unit.
#[derive(Clone, Default)]
pub struct Samples(pub Vec<f64>);

impl Samples {
    pub fn push(&mut self, value: f64) {
        self.0.push(value);
    }
    pub fn sorted(&self) -> Vec<f64> {
        let mut values = self.0.clone();
        values.sort_by(|a, b| a.total_cmp(b));
        values
    }
    /// The nearest-rank percentile `q` (0..=1).
    pub fn quantile(&self, q: f64) -> f64 {
        let values = self.sorted();
        if values.is_empty() {
            return f64::NAN;
        }
        let rank = ((q * values.len() as f64).ceil() as usize).clamp(1, values.len());
        values[rank - 1]
    }
    pub fn median(&self) -> f64 {
        let values = self.sorted();
        match values.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => values[n / 2],
            n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
        }
    }
    pub fn min(&self) -> f64 {
        self.sorted().first().copied().unwrap_or(f64::NAN)
    }
    pub fn max(&self) -> f64 {
        self.sorted().last().copied().unwrap_or(f64::NAN)
    }
    pub fn mean(&self) -> f64 {
        match self.0.len() {
            0 => f64::NAN,
            n => self.0.iter().sum::<f64>() / n as f64,
        }
    }
    pub fn len(&self) -> usize {
        self.0.len()
    }
    /// "median (min–max)".
    pub fn summary(&self, digits: usize) -> String {
        if self.0.is_empty() {
            return "–".into();
        }
        format!(
            "{:.*} ({:.*}–{:.*})",
            digits,
            self.median(),
            digits,
            self.min(),
            digits,
            self.max()
        )
    }
}

/// Collects the report: every table is printed as soon as it is complete and kept for the file.
pub struct Report {
    pub text: String,
}

impl Report {
    pub fn line(&mut self, line: impl AsRef<str>) {
        println!("{}", line.as_ref());
        self.text.push_str(line.as_ref());
        self.text.push('\n');
    }
    pub fn table(&mut self, header: &[&str], rows: &[Vec<String>]) {
        self.line(format!("| {} |", header.join(" | ")));
        self.line(format!(
            "|{}|",
            header.iter().map(|_| "---").collect::<Vec<_>>().join("|")
        ));
        for row in rows {
            self.line(format!("| {} |", row.join(" | ")));
        }
        self.line("");
    }
}

/// `a / b` with two decimals, or a dash when either is missing.
pub fn ratio(a: f64, b: f64) -> String {
    if a.is_finite() && b.is_finite() && b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "–".into()
    }
}

/// kB as MB with one decimal, or `?` when unknown.
pub fn mb(kb: Option<u64>) -> String {
    kb.map(|kb| format!("{:.1}", kb as f64 / 1024.0))
        .unwrap_or_else(|| "?".into())
}

//! A real browser on the console: Debian's Chromium, headless, driven through
//! chromedriver (W3C WebDriver, with fantoccini). Each test starts its own chromedriver on
//! a port it picks itself, and its browser with it.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Where the pages' screenshots go: `SANDGATE_ARTIFACTS` (CI's kept output) or
/// `target/console-screenshots`.
pub fn screenshot_dir() -> PathBuf {
    let dir = std::env::var_os("SANDGATE_ARTIFACTS")
        .map(PathBuf::from)
        .unwrap_or_else(|| crate::common::repository("target"))
        .join("console-screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot directory");
    dir
}

/// chromedriver with one browser session; both go when it is dropped.
pub struct Browser {
    pub client: Client,
    driver: tokio::process::Child,
}

impl Browser {
    pub async fn start() -> Self {
        let mut driver = tokio::process::Command::new("chromedriver")
            .arg("--port=0")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("chromedriver (Debian's chromium-driver; scripts/test installs it)");
        let stdout = driver.stdout.take().expect("stdout");
        let mut lines = BufReader::new(stdout).lines();
        let port = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some(line) = lines.next_line().await.expect("chromedriver output") {
                if let Some(rest) = line.split("started successfully on port ").nth(1) {
                    return rest.trim_end_matches('.').parse::<u16>().expect("port");
                }
            }
            panic!("chromedriver ended without a port");
        })
        .await
        .expect("chromedriver started within a minute");
        // Its later output is not read: drain it so the driver never blocks on it.
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            json!({
                "binary": "/usr/bin/chromium",
                "args": ["--headless=new", "--no-sandbox", "--disable-gpu",
                         "--disable-dev-shm-usage", "--window-size=1280,1100"],
            }),
        );
        let client = ClientBuilder::new(hyper_util::client::legacy::connect::HttpConnector::new())
            .capabilities(capabilities)
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
            .expect("a browser session");
        Self { client, driver }
    }

    /// The element `css` once it is on the page.
    pub async fn find(&self, css: &str) -> fantoccini::elements::Element {
        self.find_at(Locator::Css(css)).await
    }

    /// The element `locator` finds, once it is on the page.
    async fn find_at(&self, locator: Locator<'_>) -> fantoccini::elements::Element {
        let found = self
            .client
            .wait()
            .at_most(Duration::from_secs(30))
            .for_element(locator)
            .await;
        match found {
            Ok(element) => element,
            Err(err) => panic!("{locator:?}: {err}\n{}", self.text().await),
        }
    }

    /// Types `text` into the field `css`, emptied first. The pages redraw as live changes
    /// arrive: a field found just before a redraw is gone (stale) by the time it is
    /// typed into, so it is found again, for up to 30 s.
    pub async fn fill(&self, css: &str, text: &str) {
        self.on_fresh(Locator::Css(css), |field| async move {
            field.clear().await?;
            field.send_keys(text).await
        })
        .await;
    }

    /// Clicks `css`, found again if a redraw made it stale before the click.
    pub async fn press(&self, css: &str) {
        self.on_fresh(
            Locator::Css(css),
            |button| async move { button.click().await },
        )
        .await;
    }

    /// Clicks what `xpath` finds (a row's button, found by the row's text), found again if
    /// a redraw made it stale before the click.
    pub async fn press_xpath(&self, xpath: &str) {
        self.on_fresh(Locator::XPath(xpath), |button| async move {
            button.click().await
        })
        .await;
    }

    /// `act` on the element `locator` finds, found again each time a redraw made it stale
    /// or while it is not yet shown.
    async fn on_fresh<F, Fut>(&self, locator: Locator<'_>, act: F)
    where
        F: Fn(fantoccini::elements::Element) -> Fut,
        Fut: std::future::Future<Output = Result<(), fantoccini::error::CmdError>>,
    {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            match act(self.find_at(locator).await).await {
                Ok(()) => return,
                // Stale: a redraw replaced it. Not interactable: found in the page before
                // the page has finished drawing it (not yet shown, or covered).
                Err(fantoccini::error::CmdError::Standard(err))
                    if matches!(
                        err.error,
                        fantoccini::error::ErrorStatus::StaleElementReference
                            | fantoccini::error::ErrorStatus::ElementNotInteractable
                    ) && tokio::time::Instant::now() < deadline => {}
                Err(err) => panic!("{locator:?}: {err:?}"),
            }
        }
    }

    /// The page's text, as the user reads it.
    pub async fn text(&self) -> String {
        match self.client.find(Locator::Css("body")).await {
            Ok(body) => body.text().await.unwrap_or_default(),
            Err(err) => format!("(no body: {err})"),
        }
    }

    /// Waits until the page's text holds `what`.
    pub async fn until_text(&self, what: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let text = self.text().await;
            if text.contains(what) {
                return text;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what:?} never shown:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Waits until the element `css` has `attribute` set to `value`.
    pub async fn until_attribute(&self, css: &str, attribute: &str, value: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(found) = self.client.find(Locator::Css(css)).await
                && found.attr(attribute).await.ok().flatten().as_deref() == Some(value)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{css} never had {attribute}={value:?}:\n{}",
                self.text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Goes to the console's `route` (`#/…`) and waits for its heading.
    pub async fn page(&self, base: &str, route: &str, heading: &str) {
        self.client
            .goto(&format!("{base}/console#/{route}"))
            .await
            .expect("navigate");
        self.until_heading(heading).await;
    }

    pub async fn until_heading(&self, heading: &str) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(found) = self.client.find(Locator::Css("main h1")).await
                && found.text().await.unwrap_or_default().starts_with(heading)
            {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no {heading:?} page:\n{}",
                self.text().await
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub async fn screenshot(&self, name: &str) {
        let png = self.client.screenshot().await.expect("screenshot");
        std::fs::write(screenshot_dir().join(format!("{name}.png")), png).expect("write");
    }

    /// What a planted payload could have done on this page: elements it would have made
    /// (the console draws no image, and runs one script), and whether it ran.
    pub async fn injected(&self) -> serde_json::Value {
        self.client
            .execute(
                "return { pwned: window.__pwned === undefined ? null : window.__pwned, \
                          images: document.querySelectorAll('img, iframe, object, embed').length, \
                          scripts: document.scripts.length, \
                          handlers: document.querySelectorAll('[onerror], [onload], [onclick], [onmouseover]').length };",
                vec![],
            )
            .await
            .expect("script")
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        // chromedriver and the browser it started share the driver's process group.
        if let Some(pid) = self.driver.id() {
            let _ = std::process::Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .status();
        }
    }
}

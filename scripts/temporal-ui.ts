// Driving the Temporal Web UI (2.42, as `temporal server start-dev` of CLI 1.5.1 serves it) with headless Chromium:
// the steps an operator takes, shared by the browser test (test/e2e/ui-decisions.test.ts) and the screenshots
// (scripts/screenshot-ui.ts), so that the README's pictures show what the test does. Every step waits for what it
// needs to see; the UI renders after load, and some of its elements exist twice (one copy per layout breakpoint),
// so the visible one is found by its accessible name or by the dialog that is open.
import { existsSync } from 'node:fs';
import puppeteer, { type Browser, type Frame, type Page } from 'puppeteer-core';

export const CHROMIUM_PATH = process.env.CHROMIUM_PATH ?? '/usr/bin/chromium';
export const VIEWPORT = { width: 1280, height: 900 };
const DETAILS_IFRAME = 'iframe[src*="/render?content="]';
const MORE_ACTIONS = '::-p-aria([name="More Actions"][role="button"])';

/** Headless Chromium; fails naming the package to install when there is none (never a skipped test). */
export async function launchChromium(): Promise<Browser> {
  if (!existsSync(CHROMIUM_PATH)) {
    throw new Error(
      `no Chromium at ${CHROMIUM_PATH}: install Debian's chromium package (apt-get install chromium; .ci/run does) ` +
        'or set CHROMIUM_PATH to a Chromium binary',
    );
  }
  return puppeteer.launch({
    executablePath: CHROMIUM_PATH,
    headless: true,
    defaultViewport: VIEWPORT,
    // The caller closes it, in order, on every exit path including signals.
    handleSIGINT: false,
    handleSIGTERM: false,
    // Over a pipe, Chromium exits with this process even when it is killed outright.
    pipe: true,
    // Root in a container has no user namespace sandbox; /dev/shm there is often too small for Chromium.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu'],
  });
}

/** A workflow run's page, or one of its tabs (`user-metadata` holds Current Details). */
export function workflowPage(
  uiUrl: string,
  run: { namespace: string; workflowId: string; runId: string },
  tab: 'history' | 'user-metadata' | 'search-attributes' = 'history',
): string {
  return `${uiUrl}/namespaces/${run.namespace}/workflows/${encodeURIComponent(run.workflowId)}/${run.runId}/${tab}`;
}

/**
 * The UI renders Current Details (markdown) in a same-origin iframe, which it replaces as its data arrives (a wait
 * inside one iframe can outlive it); waits from the page until the current iframe's heading says `heading` and its
 * fonts are loaded.
 */
export async function currentDetails(page: Page, heading: string): Promise<Frame> {
  const rendered = `(() => {
    const doc = document.querySelector(${JSON.stringify(DETAILS_IFRAME)})?.contentDocument;
    return doc?.fonts.status === 'loaded' && doc.querySelector('h2')?.textContent.includes(${JSON.stringify(heading)});
  })()`;
  await page.waitForFunction(rendered);
  const frame = await (await page.$(DETAILS_IFRAME))?.contentFrame();
  if (!frame) throw new Error('the Current Details iframe went away');
  return frame;
}

/** The decision from the UI as rendered Current Details gives it: the More Actions entry, the name, the Data lines. */
export interface RenderedUiDecision {
  action: string;
  name: string;
  inputs: string[];
}

/** Reads the "From this UI" paragraph and the JSON block after it, as an operator would. */
export async function renderedUiDecision(frame: Frame): Promise<RenderedUiDecision> {
  // A string, not a function: the project compiles without the DOM library.
  const found = (await frame.evaluate(`(() => {
    const intro = [...document.querySelectorAll('p')].find((p) => p.textContent.startsWith('From this UI'));
    let block = intro?.nextElementSibling;
    while (block && block.tagName !== 'PRE') block = block.nextElementSibling;
    if (!intro || !block) return null;
    return {
      action: intro.querySelector('strong')?.textContent.replace(/^More Actions → /, '') ?? '',
      name: intro.querySelector('code')?.textContent ?? '',
      inputs: block.textContent.trim().split('\\n'),
    };
  })()`)) as RenderedUiDecision | null;
  if (found === null) throw new Error('Current Details shows no decision from the UI');
  return found;
}

const UPDATE_DIALOG = 'dialog[data-testid="update-confirmation-modal"][open]';
const DATA_EDITOR = `${UPDATE_DIALOG} [role="textbox"][data-language="json"]`;
const UPDATE_NAME = `${UPDATE_DIALOG} #update-select`;

/** More Actions → Send an Update, and the update picked by name from the ones the workflow defines. */
export async function openUpdateDialog(page: Page, name: string): Promise<void> {
  await page.waitForSelector(MORE_ACTIONS);
  await page.click(MORE_ACTIONS);
  await page.waitForSelector('::-p-aria(Send an Update)');
  await page.click('::-p-aria(Send an Update)');
  await page.waitForSelector(`${UPDATE_DIALOG} [data-testid="update-select-button"]`, { visible: true });
  await page.click(`${UPDATE_DIALOG} [data-testid="update-select-button"]`);
  const option = `${UPDATE_DIALOG} li[role="option"] ::-p-text(${name})`;
  await page.waitForSelector(option, { visible: true });
  await page.click(option);
  // Until its list has closed, the select takes keys typed anywhere as a search: the r's of the Data would step
  // it on to rebindUpdate.
  await page.waitForSelector(`${UPDATE_DIALOG} ul[role="listbox"]`, { hidden: true });
  await expectUpdateName(page, name);
}

/** The update the open dialog will send, as its Name field shows it. */
async function expectUpdateName(page: Page, name: string): Promise<void> {
  await page.waitForFunction(
    `document.querySelector(${JSON.stringify(UPDATE_NAME)})?.value === ${JSON.stringify(name)}`,
    {
      timeout: 5_000,
    },
  );
}

/**
 * Replaces the dialog's Data with `input`, typed as an operator pastes it. Then focus moves on: the editor reformats
 * its JSON when it loses focus, and the dialog grows, so a click on Submit while it has focus would land on the
 * place Submit was.
 */
export async function enterUpdateData(page: Page, input: string): Promise<void> {
  await page.click(DATA_EDITOR);
  await page.keyboard.down('Control');
  await page.keyboard.press('KeyA');
  await page.keyboard.up('Control');
  await page.type(DATA_EDITOR, input);
  await page.click(`${UPDATE_DIALOG} [data-testid="update-id"]`);
}

/**
 * Submits the open update dialog, which must still name update `name`, and waits for its answer: accepted (the
 * dialog closes and the UI says so), or refused with the workflow's message (the update's validator rejected it;
 * the dialog stays open and shows it).
 */
export async function submitUpdate(page: Page, name: string): Promise<{ accepted: true } | { refused: string }> {
  await expectUpdateName(page, name);
  await page.click(`${UPDATE_DIALOG} [data-testid="confirm-modal-button"]`);
  const answer = (await (
    await page.waitForFunction(`(() => {
      const dialog = document.querySelector(${JSON.stringify(UPDATE_DIALOG)});
      if (!dialog) return { accepted: true };
      const refusal = dialog.querySelector('[role="alert"] p')?.textContent.trim();
      return refusal ? { refused: refusal } : false;
    })()`)
  ).jsonValue()) as { accepted: true } | { refused: string };
  if ('accepted' in answer) await page.waitForSelector('::-p-text(Update successful)');
  return answer;
}

"""A page as the model reads it: its visible text in document order (a web component's open
shadow root where it shows), with the interactive elements numbered, capped in the page before
anything crosses to agentd (the service runs `SNAPSHOT_JS` in a world of its own, where the
page's scripts cannot rewrite the builtins it counts with).

Each numbered element gets a `data-agentd-ref` attribute and a description (its kind, visible
text, link target, form). The page can move or rewrite those attributes, so an action looks
the element up again and refuses when what it finds no longer matches what was read
(`describe` and `same_element`): the owner approves the element the card showed.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

REF_ATTR = "data-agentd-ref"

# An element's visibility, visible label and description (kind, text, link, form): shared by
# the snapshot and by `DESCRIBE_JS`, which checks an element again just before acting on it.
_ELEMENT_FUNCS = r"""
  const shown = (el) => {
    const r = el.getBoundingClientRect(); const st = getComputedStyle(el);
    return r.width > 0 && r.height > 0 && st.visibility !== 'hidden' && st.display !== 'none';
  };
  const label = (el) => {
    let t = el.getAttribute('aria-label') || '';
    if (!t && el.labels && el.labels.length) {
      // The label's own words, without the control it wraps (a list's options, say).
      const c = el.labels[0].cloneNode(true);
      for (const x of c.querySelectorAll('input,select,textarea,button')) x.remove();
      t = c.textContent;
    }
    if (!t) t = (el.innerText || el.value || el.getAttribute('placeholder') ||
                 el.getAttribute('title') || el.getAttribute('alt') || el.name || '');
    return t.replace(/\s+/g, ' ').trim().slice(0, 120);
  };
  // Every element matching `sel` in the document and in each open shadow root in it, at
  // any depth (querySelectorAll stops at a shadow root; Playwright's selectors do not).
  const deepAll = (sel) => {
    const found = []; const roots = [document];
    while (roots.length) {
      const root = roots.pop();
      for (const el of root.querySelectorAll(sel)) found.push(el);
      for (const el of root.querySelectorAll('*')) if (el.shadowRoot) roots.push(el.shadowRoot);
    }
    return found;
  };
  const describe = (el) => {
    const tag = el.tagName.toLowerCase();
    const type = (el.getAttribute('type') || '').toLowerCase();
    const form = el.form || el.closest('form');
    let kind = 'button';
    if (tag === 'a') kind = 'link';
    else if (tag === 'select') kind = 'select';
    else if (tag === 'textarea' || el.isContentEditable) kind = 'textarea';
    else if (tag === 'input' && ['checkbox', 'radio'].includes(type)) kind = type;
    else if (tag === 'input' && ['submit', 'image'].includes(type)) kind = 'submit';
    else if (tag === 'input' && type === 'file') kind = 'file';
    else if (tag === 'input' && !['button', 'reset'].includes(type)) kind = 'input';
    else if (tag === 'button' && form && (type === 'submit' || type === '')) kind = 'submit';
    return {
      tag, kind, type, text: label(el), name: (el.name || '').slice(0, 80),
      href: tag === 'a' ? el.href : '',
      download: tag === 'a' && el.hasAttribute('download'),
      form_action: form ? (form.action || location.href) : '',
      form_method: form ? (form.method || 'get').toLowerCase() : '',
      password: type === 'password',
      options: tag === 'select'
        ? [...el.options].slice(0, 20).map(o => o.text.trim().slice(0, 60)) : [],
    };
  };
"""

# Runs in a frame: (maxChars, maxElements, generation, elements numbered before, whether to
# leave a slot for each shown frame in it) → {title, url, parts, elements, cut, n, over}, `over`
# counting the shown elements met past the cap, which get no number. The text
# comes in `parts`: a frame's own text goes between two of them (the service reads each frame
# in a world of its own, the frame elements being left in `agentdFrames`, that world's global,
# which the page cannot see). A slot is a null in `out`, not a marker in the text: no text a
# page writes can pass for one.
SNAPSHOT_JS = (
    r"""
([maxChars, maxEls, gen, firstN, readFrames]) => {
  const ATTR = 'data-agentd-ref';
  FUNCS
  for (const e of deepAll('[' + ATTR + ']')) e.removeAttribute(ATTR);
  const INTERACTIVE = 'a[href],button,input:not([type=hidden]),select,textarea,summary,' +
    '[role=button],[role=link],[role=checkbox],[contenteditable=""],[contenteditable=true]';
  const out = []; const els = []; const frames = [];
  let size = 0; let cut = false; let n = firstN; let over = 0;
  let last = '\n';  // the last character pushed
  const push = (s) => {
    if (cut || !s) return;
    if (size + s.length > maxChars) { out.push(s.slice(0, maxChars - size)); cut = true; return; }
    out.push(s); size += s.length; last = s[s.length - 1];
  };
  // `faded`: the text's element has `visibility: hidden`, which its children inherit but may
  // override, so they are still walked; its own text does not show. `lines`: the element
  // keeps its text's line breaks (`<pre>`, code): they show, so they are read.
  const walk = (node, faded, lines) => {
    if (cut) return;
    if (node.nodeType === 3) {
      if (faded) return;
      const t = node.textContent.replace(lines ? /[^\S\n]+/g : /\s+/g, ' ');
      if (t.trim() || (lines && t.includes('\n'))) push(t);
      // Whitespace between inline elements shows as a space ("more 16 more 17"); one will do.
      else if (t && last !== ' ' && last !== '\n') push(' ');
      return;
    }
    if (node.nodeType !== 1) return;
    const el = node; const tag = el.tagName;
    if (['SCRIPT', 'STYLE', 'NOSCRIPT', 'TEMPLATE', 'HEAD'].includes(tag)) return;
    const st = getComputedStyle(el);
    const fades = st.visibility !== 'visible';
    const keeps = /^(pre|pre-wrap|pre-line|break-spaces)$/.test(st.whiteSpace);
    if (tag === 'BR') { if (st.display !== 'none') push('\n'); return; }
    if (tag === 'SLOT') {
      // Where a shadow root shows its host's children (or, given none, its own); it has no
      // box of its own, so it is never "shown".
      if (st.display === 'none') return;
      const given = el.assignedNodes();
      for (const child of (given.length ? given : el.childNodes)) walk(child, fades, keeps);
      return;
    }
    if (st.display === 'contents') {
      // A wrapper with no box of its own (never "shown"): its children show in its place.
      for (const child of (el.shadowRoot || el).childNodes) walk(child, fades, keeps);
      return;
    }
    const root = tag === 'BODY' || tag === 'HTML';
    if (!root && !shown(el) && el.getClientRects().length === 0) return;
    if (tag === 'IFRAME' || tag === 'FRAME') {
      if (!shown(el)) return;
      if (readFrames) { frames.push(el); out.push(null); }
      else push('\n[a frame, not read: it is nested too deep]\n');
      return;
    }
    if (el.matches(INTERACTIVE) && shown(el)) {
      const d = describe(el);
      if (n >= maxEls) over += 1;
      else {
        n += 1; d.ref = gen + '-' + n; el.setAttribute(ATTR, d.ref); els.push(d);
        push(' [' + d.ref + '] ');
      }
      // A field has no words of its own: it reads as its kind and label, also past the cap
      // (marked there), so the reading still shows it is on the page.
      if (d.kind !== 'link' && d.kind !== 'button' && d.kind !== 'submit') {
        const kind = d.kind + (d.password ? ' (password)' : '');
        push((d.ref ? '' : ' ') + kind + ' "' + d.text + '" ' + (d.ref ? '' : '(no number) '));
        return;
      }
    }
    const block = st.display;
    if (block !== 'inline') push('\n');
    // An open shadow root is what the element shows: its children come in through its slots.
    // A closed one is out of reach (shadowRoot is null): its content is not read.
    for (const child of (el.shadowRoot || el).childNodes) walk(child, fades, keeps);
    if (block !== 'inline') push('\n');
  };
  walk(document.body || document.documentElement, false, false);
  const parts = [''];
  for (const s of out) {
    if (s === null) parts.push(''); else parts[parts.length - 1] += s;
  }
  globalThis.agentdFrames = frames;
  return {
    title: document.title.slice(0, 200), url: location.href, parts, elements: els, cut, n, over,
  };
}
"""
).replace("FUNCS", _ELEMENT_FUNCS)

# Runs with a ref: how many elements carry it now, and the first one's description (the
# snapshot's shape). The service runs it in agentd's own world, as it runs the snapshot: the
# page cannot rewrite the builtins or getters it reads to make a changed element pass.
DESCRIBE_JS = (
    "(ref) => {" + _ELEMENT_FUNCS + "const found = deepAll('[ATTR=\"' + CSS.escape(ref) + '\"]');"
    " return {count: found.length, element: found.length ? describe(found[0]) : null}; }"
).replace("ATTR", REF_ATTR)


# Runs with a ref: submits the form of the one element carrying it, with the browser's own
# requestSubmit (run in agentd's world: a page that replaced HTMLFormElement's requestSubmit, or
# the `form` getter, in its own world cannot turn the submission into another); "changed" when
# not exactly one element carries the ref, "no form" when it is in none.
SUBMIT_JS = (
    "(ref) => {" + _ELEMENT_FUNCS + "const found = deepAll('[ATTR=\"' + CSS.escape(ref) + '\"]');"
    " if (found.length !== 1) return 'changed';"
    " const form = found[0].form || found[0].closest('form');"
    " if (!form) return 'no form';"
    " form.requestSubmit(); return 'submitted'; }"
).replace("ATTR", REF_ATTR)


class Element(BaseModel):
    ref: str = ""
    tag: str
    kind: str
    type: str = ""
    text: str = ""
    name: str = ""
    href: str = ""
    download: bool = False
    form_action: str = ""
    form_method: str = ""
    password: bool = False
    options: list[str] = Field(default_factory=list)
    frame: str = ""  # the URL of the frame it is in; empty: the page itself

    def shown(self) -> str:
        """One line for the model and the card."""
        bits = [f"[{self.ref}] {self.kind}", f'"{self.text}"']
        if self.frame:
            bits.append(f"(in a frame from {host_of(self.frame) or self.frame[:100]})")
        if self.href:
            bits.append(f"→ {self.href[:200]}")
        if self.form_action and self.kind in ("submit", "input", "textarea", "select"):
            bits.append(f"(form {self.form_method.upper()} {self.form_action[:200]})")
        if self.options:
            bits.append("options: " + ", ".join(self.options))
        return " ".join(bits)


class Described(BaseModel):
    """What `DESCRIBE_JS` finds for a ref."""

    count: int
    element: Element | None = None


class Tab(BaseModel):
    """One of the turn's windows, as the reading lists it."""

    number: int
    url: str
    current: bool = False
    new: bool = False  # a page opened it since the model last read

    def shown(self) -> str:
        if self.current:
            return f"[tab {self.number}] {self.url[:200]} (this page)"
        if self.new:
            return f"[tab {self.number}] {self.url[:200]} (new: a page opened it; not switched to)"
        return f"[tab {self.number}] {self.url[:200]}"


class Snapshot(BaseModel):
    title: str = ""
    url: str = ""
    text: str = ""
    elements: list[Element] = Field(default_factory=list)
    cut: bool = False
    unnumbered: int = 0  # links, buttons and fields shown past `max_elements`, with no number
    unfinished: float = 0.0  # seconds the page was given to load, when it did not finish
    tabs: list[Tab] = Field(default_factory=list)
    note: str = ""  # what happened to the turn's tabs since the last read


class FrameRead(BaseModel):
    """What `SNAPSHOT_JS` returns for one frame."""

    title: str = ""
    url: str = ""
    parts: list[str] = Field(default_factory=lambda: [""])
    elements: list[Element] = Field(default_factory=list)
    cut: bool = False
    n: int = 0
    over: int = 0


def tidy(text: str) -> str:
    """A reading's text with runs of spaces and of blank lines folded, and lines trimmed."""
    text = re.sub(r"[ \t]*\n[ \t]*", "\n", re.sub(r"[ \t]{2,}", " ", text))
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def same_element(read: Element, now: Element) -> bool:
    """The element the model read is still the one it names (the page may have moved refs)."""
    keys = ("tag", "kind", "type", "text", "href", "form_action", "form_method", "password")
    return all(getattr(read, k) == getattr(now, k) for k in keys)


def is_web_url(url: str) -> bool:
    """An http(s) URL with a host: the only kind agentd opens. A file:, chrome:, view-source:
    or data: URL would show the sandbox's files (the host's /etc is in it) or the browser's
    own pages, none of which the proxy sees."""
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return False
    return scheme in ("http", "https") and bool(host_of(url))


def host_of(url: str) -> str:
    try:
        return (urlsplit(url).hostname or "").lower()
    except ValueError:
        return ""


def render(snap: Snapshot, max_chars: int) -> str:
    """The page for the model (wrapped as untrusted data by the tool)."""
    text = snap.text[:max_chars]
    notes = []
    if snap.unfinished:
        notes.append(f"the page had not finished loading after {snap.unfinished:g} s")
    if snap.cut or len(snap.text) > max_chars:
        notes.append(f"the page's text was cut at {max_chars} characters")
    head = f"URL: {snap.url}\nTitle: {snap.title}\n"
    if snap.note:
        head += f"Note: {snap.note}\n"
    listing = "\n".join(e.shown() for e in snap.elements)
    body = f"{head}\n{text or '(no text)'}\n\nInteractive elements:\n{listing or '(none)'}"
    if snap.unnumbered:
        body += "\n\n" + _past_the_cap(len(snap.elements), snap.unnumbered)
    if len(snap.tabs) > 1:
        tabs = "\n".join(t.shown() for t in snap.tabs)
        body += "\n\nOpen tabs (browser_tab switches to one):\n" + tabs
    if notes:
        body += "\n\n[Truncated: " + "; ".join(notes) + ".]"
    return body


def _past_the_cap(numbered: int, more: int) -> str:
    # Scrolling does not help: a reading takes the whole page, numbering in document order.
    return (
        f"[Only the first {numbered} links, buttons and fields are numbered. {more} more show "
        "in the text without a number and cannot be clicked, typed into or chosen. To act on "
        "one, open a page that shows fewer: a search for it, a filtered list, or the address "
        "of the section it is in.]"
    )

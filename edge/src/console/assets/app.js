// Sandgate's operator console. Every page is built with DOM calls and text nodes, never
// from markup strings: what tenants wrote (titles, tags, aliases, model names) is shown
// as text, whatever it holds. Every call goes through /console/api/, with the session's
// cookies; a change carries the session's CSRF proof.
'use strict';

(() => {
  const page = document.getElementById('page');
  const statusLine = document.getElementById('status');
  const session = { csrf: null, admin: false, master: false };
  // A key just created, shown on the keys page until it is left.
  let createdKey = null;
  const REFRESH_MS = 5000;

  // --- building blocks ---------------------------------------------------------------

  function h(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (name.startsWith('on')) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? '' : String(value));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  const SVG = 'http://www.w3.org/2000/svg';
  function s(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function say(text, error) {
    statusLine.textContent = text || '';
    statusLine.className = error ? 'error' : '';
  }

  const money = (value) => '$' + Number(value || 0).toFixed(4);
  const seconds = (ms) => (Number(ms || 0) / 1000).toFixed(1) + ' s';
  const when = (ms) => (ms ? new Date(ms).toISOString().replace('T', ' ').slice(0, 19) : '');
  const day = (offset) => new Date(Date.now() - offset * 86400000).toISOString().slice(0, 10);
  const link = (route, text) => h('a', { href: '#/' + route.map(encodeURIComponent).join('/') }, text);

  // A table: columns are [title, value of a row, numeric?].
  function table(caption, columns, rows) {
    return h('table', {},
      h('caption', { class: 'visually-hidden' }, caption),
      h('thead', {}, h('tr', {}, columns.map(([title, , num]) => h('th', { scope: 'col', class: num ? 'num' : null }, title)))),
      h('tbody', {}, rows.length
        ? rows.map((row) => h('tr', {}, columns.map(([, value, num]) => h('td', { class: num ? 'num' : null }, value(row)))))
        : h('tr', {}, h('td', { colspan: columns.length }, 'Nothing yet.'))));
  }

  function card(label, value) {
    return h('div', { class: 'card' }, h('div', { class: 'value' }, value), h('div', { class: 'label' }, label));
  }

  // --- calls -------------------------------------------------------------------------

  class CallError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  function detailOf(data, status) {
    if (data && typeof data === 'object') {
      if (typeof data.detail === 'string') return data.detail;
      if (Array.isArray(data.detail)) return data.detail.map((item) => item.msg || '').join('; ');
      if (data.error && data.error.message) return String(data.error.message);
      if (data.message) return String(data.message);
    }
    return 'HTTP ' + status;
  }

  async function request(method, url, body) {
    const init = { method, headers: {}, credentials: 'same-origin' };
    if (body !== undefined) {
      init.headers['content-type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    if (method !== 'GET') init.headers['x-sandgate-csrf'] = session.csrf || '';
    const response = await fetch(url, init);
    const text = await response.text();
    let data = null;
    try { data = text ? JSON.parse(text) : null; } catch (_) { data = text; }
    if (!response.ok) throw new CallError(response.status, detailOf(data, response.status));
    return data;
  }

  const call = (method, path, body) => request(method, '/console/api/' + path, body);

  // A read that a session signed in only one way may not be allowed: null then, with
  // the reason kept for the page to show.
  async function optional(path) {
    try { return await call('GET', path); } catch (error) {
      if (error.status === 401 || error.status === 403) return null;
      throw error;
    }
  }

  function needs(what) {
    return h('p', { class: 'note' }, 'Sign in with ' + what + ' to see this. ', link(['login'], 'Sign in'));
  }

  // An action's button: runs it, says how it went, and draws the page again.
  function action(label, run, danger) {
    return h('button', {
      type: 'button',
      class: danger ? 'danger' : null,
      onclick: async (event) => {
        event.target.disabled = true;
        try { say(await run() || 'Done.'); await render(false); } catch (error) { say(error.message, true); } finally { event.target.disabled = false; }
      },
    }, label);
  }

  // --- pages -------------------------------------------------------------------------

  async function overview() {
    const [pools, sandboxes, spend] = await Promise.all([
      optional('api/warm-runtime-pools'),
      optional('list?show_all=true'),
      optional('api/ledger/rollup?by=model&from=' + day(0) + '&to=' + day(0) + '&limit=1000'),
    ]);
    if (!pools && !sandboxes) return [h('h1', {}, 'Overview'), needs('the admin password')];
    const runtimes = sandboxes ? sandboxes.runtimes : [];
    const byState = {};
    for (const runtime of runtimes) byState[runtime.status] = (byState[runtime.status] || 0) + 1;
    const starts = runtimes.filter((runtime) => runtime.timeline);
    const cold = starts.filter((runtime) => runtime.timeline.launch === 'cold');
    const reasons = {};
    for (const runtime of cold) {
      const reason = runtime.timeline.cold_reason || 'unknown';
      reasons[reason] = (reasons[reason] || 0) + 1;
    }
    for (const pool of (pools ? pools.pools : [])) {
      for (const [reason, count] of Object.entries(pool.cold_starts || {})) reasons['pool ' + pool.name + ': ' + reason] = count;
    }
    const spent = spend ? spend.rows.reduce((sum, row) => sum + row.spend, 0) : 0;
    return [
      h('h1', {}, 'Overview'),
      h('div', { class: 'cards' },
        Object.entries(byState).map(([state, count]) => card('Sandboxes ' + state.toLowerCase(), count)),
        card('Spend today', money(spent)),
        card('Cold starts', starts.length ? cold.length + ' of ' + starts.length + ' (' + Math.round(100 * cold.length / starts.length) + '%)' : 'none')),
      h('h2', {}, 'Pools'),
      table('Pools', [
        ['Pool', (pool) => pool.name],
        ['State', (pool) => pool.state],
        ['Ready', (pool) => pool.ready + ' of ' + pool.target, true],
        ['Starting', (pool) => pool.starting, true],
        ['Failed', (pool) => pool.failed, true],
        ['Failures', (pool) => (pool.failures || []).join('; ')],
      ], pools ? pools.pools : []),
      h('h2', {}, 'Cold starts by reason'),
      table('Cold starts by reason', [['Reason', (row) => row[0]], ['Count', (row) => row[1], true]], Object.entries(reasons)),
    ];
  }

  // A start's timeline, drawn: each phase from the start, on one scale.
  function timeline(start) {
    if (!start) return 'no timeline';
    const phases = [
      ['running', start.running_at_ms], ['alive', start.alive_at_ms],
      ['first webhook', start.first_webhook_at_ms], ['first LLM call', start.first_llm_call_at_ms],
    ].filter(([, at]) => at);
    const span = Math.max(1, ...phases.map(([, at]) => at - start.started_at_ms));
    const svg = s('svg', { width: 320, height: 16 + 14 * phases.length, role: 'img' });
    svg.append(s('title', {}, start.launch + ' start' + (start.cold_reason ? ' (' + start.cold_reason + ')' : '')));
    phases.forEach(([name, at], index) => {
      const width = Math.max(2, 180 * (at - start.started_at_ms) / span);
      svg.append(s('rect', { x: 0, y: 4 + 14 * index, width, height: 10, class: start.launch === 'cold' ? 'bar cold' : 'bar' }));
      svg.append(s('text', { x: width + 4, y: 13 + 14 * index }, name + ' +' + seconds(at - start.started_at_ms)));
    });
    return h('div', {}, h('span', {}, start.launch + (start.cold_reason ? ': ' + start.cold_reason : '')), svg);
  }

  async function pools() {
    const [configs, sandboxes] = await Promise.all([optional('api/warm-runtime-configs'), optional('list?show_all=true')]);
    if (!configs) return [h('h1', {}, 'Pools and sandboxes'), needs('the admin password')];
    const setCount = (config) => {
      const id = 'count-' + config.name;
      const input = h('input', { id, type: 'number', min: 0, max: 100, value: config.count, 'aria-label': 'Count of pool ' + config.name });
      const body = () => ({
        image: config.image, working_dir: config.working_dir, command: config.command,
        environment: config.environment, count: Number(input.value), run_as_user: config.run_as_user,
        run_as_group: config.run_as_group, fs_group: config.fs_group, fuse_s3_mount: config.fuse_s3_mount,
      });
      return h('span', {}, input, ' ', action('Set count', async () => {
        await call('PUT', 'api/admin/warm-runtime-configs/' + encodeURIComponent(config.name), body());
        return 'Pool ' + config.name + ' set to ' + input.value + '.';
      }));
    };
    const transition = (runtime, verb) => action(verb === 'pause' ? 'Pause' : 'Stop', async () => {
      await call('POST', verb, { runtime_id: runtime.runtime_id });
      return 'Sandbox ' + runtime.runtime_id + ': ' + verb + ' asked.';
    }, verb === 'stop');
    return [
      h('h1', {}, 'Pools and sandboxes'),
      h('h2', {}, 'Warm pools'),
      table('Warm pool configurations', [
        ['Pool', (config) => config.name],
        ['Source', (config) => config.source],
        ['Image', (config) => config.image],
        ['Environment', (config) => Object.keys(config.environment || {}).join(', ')],
        ['Count', setCount],
      ], configs.configs),
      h('h2', {}, 'Sandboxes'),
      table('Sandboxes', [
        ['Sandbox', (runtime) => runtime.runtime_id],
        ['Status', (runtime) => runtime.status],
        ['Conversation', (runtime) => runtime.session_id ? link(['conversation', runtime.session_id], runtime.session_id) : ''],
        ['Pool', (runtime) => runtime.pool || ''],
        ['Image', (runtime) => runtime.image],
        ['Created', (runtime) => when(runtime.created_at_ms)],
        ['Start', (runtime) => timeline(runtime.timeline)],
        ['Actions', (runtime) => {
          const status = String(runtime.status).toLowerCase();
          if (status === 'running' || status === 'starting') return [transition(runtime, 'pause'), ' ', transition(runtime, 'stop')];
          return status === 'paused' ? transition(runtime, 'stop') : '';
        }],
      ], sandboxes ? sandboxes.runtimes : []),
    ];
  }

  const measureColumns = [
    ['Spend', (row) => money(row.spend), true],
    ['Calls', (row) => row.calls, true],
    ['Failed', (row) => row.failed_calls, true],
    ['Input tokens', (row) => row.prompt_tokens, true],
    ['Output tokens', (row) => row.completion_tokens, true],
    ['Cache read / written', (row) => row.cache_read_tokens + ' / ' + row.cache_write_tokens, true],
    ['Running', (row) => seconds(row.running_ms), true],
    ['Paused', (row) => seconds(row.paused_ms), true],
    ['Sandbox cost', (row) => money(row.sandbox_cost), true],
    ['Events', (row) => row.events, true],
    ['Webhooks', (row) => row.webhooks, true],
  ];

  async function conversations(_, query) {
    const from = query.get('from') || day(29);
    const to = query.get('to') || day(0);
    const group = query.get('by') || 'conversation';
    const tag = query.get('tag') || '';
    const after = query.get('after') || '';
    if (group === 'tag' && !tag) {
      return [h('h1', {}, 'Conversations'), h('p', { role: 'alert' }, 'A rollup by tag needs the tag\'s key (project, team…).')];
    }
    const by = group === 'tag' ? 'tag:' + tag : group;
    const params = 'by=' + encodeURIComponent(by) + '&from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to);
    const here = 'by=' + encodeURIComponent(group) + '&tag=' + encodeURIComponent(tag) + '&from=' + encodeURIComponent(from) + '&to=' + encodeURIComponent(to);
    const rollup = await optional('api/ledger/rollup?' + params + '&limit=50' + (after ? '&after=' + encodeURIComponent(after) : ''));
    if (!rollup) return [h('h1', {}, 'Conversations'), needs('the admin password')];
    const input = (name, label, value, type) => h('label', {}, label, h('input', { name, type, value }));
    const form = h('form', {
      onsubmit: (event) => {
        event.preventDefault();
        const data = new FormData(event.target);
        location.hash = '#/conversations?' + new URLSearchParams(data).toString();
      },
    },
    h('label', {}, 'Group by', h('select', { name: 'by' }, ['conversation', 'team', 'user', 'key', 'model', 'day', 'tag'].map((value) => h('option', { value, selected: value === group }, value)))),
    input('tag', 'Tag key (by tag)', tag, 'text'),
    input('from', 'From', from, 'date'), input('to', 'To', to, 'date'), h('button', { type: 'submit' }, 'Show'));
    const first = by === 'conversation'
      ? ['Conversation', (row) => [link(['conversation', row.id], row.title || row.id), row.title ? h('div', { class: 'note' }, row.id) : null]]
      : [group === 'tag' ? tag : group[0].toUpperCase() + group.slice(1), (row) => row.id];
    const described = by === 'conversation'
      ? [['Status', (row) => row.status || ''], ['Tags', (row) => Object.entries(row.tags || {}).map(([key, value]) => key + '=' + value).join(', ')],
        ['User', (row) => row.user_id || ''], ['Team', (row) => row.team_id || ''], ['Key', (row) => row.key_alias || '']]
      : [];
    const next = rollup.next
      ? h('a', { href: '#/conversations?' + here + '&after=' + encodeURIComponent(rollup.next) }, 'Next page')
      : null;
    return [
      h('h1', {}, 'Conversations'), form,
      h('p', {}, rollup.total_rows + ' rows. ', h('a', { href: '/console/api/api/ledger/rollup?' + params + '&format=csv', download: 'ledger.csv' }, 'Export CSV'), ' · ',
        h('a', { href: '/console/api/api/ledger/rollup?' + params + '&format=json', download: 'ledger.json' }, 'Export JSON')),
      table('Ledger rollup', [first, ...described, ...measureColumns], rollup.rows), next,
    ];
  }

  async function conversation([id]) {
    const [ledger, record, events, calls] = await Promise.all([
      optional('api/ledger/conversations/' + encodeURIComponent(id)),
      optional('api/v1/conversations/' + encodeURIComponent(id)).catch(() => null),
      optional('api/v1/conversations/' + encodeURIComponent(id) + '/events').catch(() => null),
      optional('spend/logs?session_id=' + encodeURIComponent(id)),
    ]);
    if (!ledger) return [h('h1', {}, 'Conversation ' + id), needs('the admin password')];
    const total = ledger.total;
    const eventItems = events ? (events.items || events.events || events) : [];
    const sandbox = ledger.sandbox;
    return [
      h('h1', {}, 'Conversation ', h('span', { id: 'conversation-id' }, id)),
      record ? h('p', {}, h('strong', {}, record.title || '(untitled)'), ' · status ', String(record.status || record.execution_status || ''),
        ' · tags ', Object.entries(record.tags || {}).map(([key, value]) => key + '=' + value).join(', ')) : null,
      h('p', { id: 'conversation-owner' }, 'Billed to user ', ledger.user_id || '—', ', team ', ledger.team_id || '—', ', key ', ledger.key_alias || '—'),
      h('div', { class: 'cards' },
        card('Spend', h('span', { id: 'ledger-spend', 'data-value': total.spend }, money(total.spend))),
        card('Calls (failed)', total.calls + ' (' + total.failed_calls + ')'),
        card('Tokens in / out', total.prompt_tokens + ' / ' + total.completion_tokens),
        card('Sandbox running', h('span', { id: 'ledger-running', 'data-value': total.running_ms }, seconds(total.running_ms))),
        card('Sandbox paused', seconds(total.paused_ms)),
        card('Sandbox cost', money(total.sandbox_cost)),
        card('Cache read / written', total.cache_read_tokens + ' / ' + total.cache_write_tokens),
        card('Events / webhooks', total.events + ' / ' + total.webhooks)),
      h('h2', {}, 'By model'),
      table('Spend by model', [['Model', (row) => row[0]], ...measureColumns.slice(0, 6).map(([title, value, num]) => [title, (row) => value(row[1]), num])], Object.entries(ledger.by_model || {})),
      h('h2', {}, 'Sandbox'),
      sandbox ? h('div', {}, 'Status ' + sandbox.status + (sandbox.resource_factor ? ', resource factor ' + sandbox.resource_factor : ''), timeline(sandbox.start)) : h('p', {}, 'No sandbox now.'),
      h('h2', {}, 'Calls'),
      calls ? table('Calls', [
        ['When', (entry) => when(entry.started_at_ms)],
        ['Model', (entry) => entry.model],
        ['Key', (entry) => entry.key_alias || ''],
        ['User', (entry) => entry.key_user_id || entry.user || ''],
        ['Team', (entry) => entry.team_id || ''],
        ['Tokens in / out', (entry) => (entry.prompt_tokens || 0) + ' / ' + (entry.completion_tokens || 0), true],
        ['Latency', (entry) => entry.latency_ms + ' ms', true],
        ['Spend', (entry) => money(entry.spend), true],
        ['Status', (entry) => entry.status],
      ], Array.isArray(calls) ? calls : (calls.data || [])) : needs('the master key'),
      h('h2', {}, 'Events'),
      table('Events', [
        ['When', (event) => String(event.timestamp || '')],
        ['Kind', (event) => String(event.kind || '')],
        ['Source', (event) => String(event.source || '')],
      ], Array.isArray(eventItems) ? eventItems.slice(-100) : []),
    ];
  }

  async function keys() {
    const list = await optional('key/list?return_full_object=true&size=100');
    if (!list) return [h('h1', {}, 'Teams, users and keys'), needs('the master key')];
    const all = list.keys || [];
    const [teams, users] = await Promise.all([optional('team/list'), optional('user/list?page_size=100')]);
    const created = h('div', { 'aria-live': 'polite' }, createdKey
      ? h('p', {}, 'The new key, shown once: ', h('code', { class: 'secret', id: 'new-key' }, createdKey))
      : null);
    const form = h('form', {
      onsubmit: async (event) => {
        event.preventDefault();
        const data = new FormData(event.target);
        const body = {};
        for (const name of ['key_alias', 'team_id', 'user_id']) if (data.get(name)) body[name] = data.get(name);
        if (data.get('max_budget')) body.max_budget = Number(data.get('max_budget'));
        try {
          const key = await call('POST', 'key/generate', body);
          // Shown until the page is left; the page is drawn again with the new key's team.
          createdKey = key.key;
          say('Key created.');
          await render(false);
        } catch (error) { say(error.message, true); }
      },
    },
    ['key_alias', 'team_id', 'user_id', 'max_budget'].map((name) => h('label', {}, name.replace('_', ' '), h('input', { name, type: name === 'max_budget' ? 'number' : 'text', step: name === 'max_budget' ? 'any' : null }))),
    h('button', { type: 'submit' }, 'Create key'));
    const budget = (team) => {
      const input = h('input', { type: 'number', step: 'any', min: 0, value: team.max_budget ?? '', 'aria-label': 'Budget of team ' + team.team_id });
      return h('span', {}, input, ' ', action('Set budget', async () => {
        await call('POST', 'team/update', { team_id: team.team_id, max_budget: Number(input.value) });
        return 'Team ' + team.team_id + ' budget set.';
      }));
    };
    return [
      h('h1', {}, 'Teams, users and keys'),
      h('h2', {}, 'Keys'), form, created,
      table('Keys', [
        ['Alias', (key) => key.key_alias || ''],
        ['Key', (key) => key.key_name || ''],
        ['Team', (key) => key.team_id || ''],
        ['User', (key) => key.user_id || ''],
        ['Spend of budget', spendOf, true],
        ['Blocked', (key) => (key.blocked ? 'yes' : '')],
        ['Actions', (key) => action('Revoke', async () => {
          await call('POST', 'key/delete', { keys: [key.token] });
          return 'Key ' + (key.key_alias || key.key_name) + ' revoked.';
        }, true)],
      ], all),
      h('h2', {}, 'Teams'),
      table('Teams', [
        ['Team', (team) => link(['team', team.team_id], team.team_id)],
        ['Alias', (team) => team.team_alias || ''],
        ['Members', (team) => (team.members_with_roles || []).length, true],
        ['Spend of budget', spendOf, true],
        ['Blocked', (team) => (team.blocked ? 'yes' : '')],
        ['Budget', budget],
      ], teams || []),
      h('h2', {}, 'Users'),
      users && users.total > users.users.length ? h('p', {}, users.users.length + ' of ' + users.total + ' users.') : null,
      table('Users', [
        ['User', (user) => link(['user', user.user_id], user.user_id)],
        ['Teams', (user) => (user.teams || []).join(', ')],
        ['Spend of budget', spendOf, true],
      ], users ? users.users : []),
    ];
  }

  const spendOf = (row) => money(row.spend) + (row.max_budget != null ? ' of ' + money(row.max_budget) : '');
  const keyColumns = [
    ['Alias', (key) => key.key_alias || ''],
    ['Key', (key) => key.key_name || ''],
    ['Spend of budget', spendOf, true],
    ['Blocked', (key) => (key.blocked ? 'yes' : '')],
  ];

  // One team: its budget and spend, its members with theirs, its keys.
  async function team([id]) {
    const info = await optional('team/info?team_id=' + encodeURIComponent(id));
    if (!info) return [h('h1', {}, 'Team ' + id), needs('the master key')];
    const team = info.team_info;
    return [
      h('h1', {}, 'Team ', h('span', { id: 'team-id' }, id)),
      h('div', { class: 'cards' },
        card('Spend of budget', spendOf(team)),
        card('Budget period', team.budget_duration || 'none'),
        card('Blocked', team.blocked ? 'yes' : 'no')),
      h('h2', {}, 'Members'),
      table('Members', [
        ['User', (member) => link(['user', member.user_id], member.user_id)],
        ['Spend of budget in team', (member) => money(member.spend)
          + (member.litellm_budget_table ? ' of ' + money(member.litellm_budget_table.max_budget) : ''), true],
      ], info.team_memberships || []),
      h('h2', {}, 'Keys'),
      table('Keys', [...keyColumns, ['User', (key) => (key.user_id ? link(['user', key.user_id], key.user_id) : '')]], info.keys || []),
    ];
  }

  // One user: its budget and spend, its teams, its keys.
  async function user([id]) {
    const info = await optional('user/info?user_id=' + encodeURIComponent(id));
    if (!info) return [h('h1', {}, 'User ' + id), needs('the master key')];
    return [
      h('h1', {}, 'User ', h('span', { id: 'user-id' }, id)),
      h('div', { class: 'cards' }, card('Spend of budget', spendOf(info.user_info))),
      h('h2', {}, 'Teams'),
      table('Teams', [
        ['Team', (team) => link(['team', team.team_id], team.team_id)],
        ['Alias', (team) => team.team_alias || ''],
        ['Blocked', (team) => (team.blocked ? 'yes' : '')],
      ], info.teams || []),
      h('h2', {}, 'Keys'),
      table('Keys', [...keyColumns, ['Team', (key) => (key.team_id ? link(['team', key.team_id], key.team_id) : '')]], info.keys || []),
    ];
  }

  const PALETTE = ['#0b5cad', '#a40e26', '#116329', '#8a4600', '#6639ba', '#1b7c83', '#57606a', '#bf3989'];

  // Spend per day of the last two weeks, stacked by group.
  function chart(title, days, series) {
    const groups = [...new Set(series.flatMap((rows) => rows.map((row) => row.id)))];
    const totals = series.map((rows) => rows.reduce((sum, row) => sum + row.spend, 0));
    const top = Math.max(...totals, 1e-9);
    const width = 36 * days.length + 60;
    const svg = s('svg', { width, height: 200, role: 'img', 'aria-label': title });
    svg.append(s('title', {}, title));
    days.forEach((date, index) => {
      let y = 170;
      for (const row of series[index]) {
        const height = 150 * row.spend / top;
        y -= height;
        const rect = s('rect', { x: 50 + 36 * index, y, width: 26, height, fill: PALETTE[groups.indexOf(row.id) % PALETTE.length] });
        rect.append(s('title', {}, date + ' ' + row.id + ': ' + money(row.spend)));
        svg.append(rect);
      }
      svg.append(s('text', { x: 50 + 36 * index, y: 185 }, date.slice(5)));
    });
    svg.append(s('text', { x: 0, y: 20 }, money(top)));
    const legend = h('div', { class: 'legend' }, groups.map((group, index) => h('span', {}, h('span', { class: 'swatch', style: null, 'data-color': index }), group)));
    legend.querySelectorAll('.swatch').forEach((swatch) => { swatch.style.background = PALETTE[Number(swatch.dataset.color) % PALETTE.length]; });
    return [h('h2', {}, title), svg, legend];
  }

  async function spend() {
    const days = Array.from({ length: 14 }, (_, index) => day(13 - index));
    const read = (by) => Promise.all(days.map((date) => optional('api/ledger/rollup?by=' + by + '&from=' + date + '&to=' + date + '&limit=1000')));
    const [teams, models] = await Promise.all([read('team'), read('model')]);
    if (teams.some((rows) => !rows)) return [h('h1', {}, 'Spend'), needs('the admin password')];
    return [
      h('h1', {}, 'Spend'),
      chart('Spend by team, per day', days, teams.map((rollup) => rollup.rows)),
      chart('Spend by model, per day', days, models.map((rollup) => rollup.rows)),
    ];
  }

  async function audit(_, query) {
    const before = query.get('before');
    const log = await optional('api/admin/audit?limit=100' + (before ? '&before=' + encodeURIComponent(before) : ''));
    if (!log) return [h('h1', {}, 'Audit log'), needs('the admin password')];
    return [
      h('h1', {}, 'Audit log'),
      table('Audit log', [
        ['When', (entry) => when(entry.at_ms)],
        ['Who', (entry) => entry.actor],
        ['From', (entry) => entry.source || ''],
        ['What', (entry) => entry.action],
        ['On', (entry) => entry.target],
        ['Detail', (entry) => (entry.detail ? JSON.stringify(entry.detail) : '')],
      ], log.entries),
      log.next ? h('a', { href: '#/audit?before=' + encodeURIComponent(log.next) }, 'Older entries') : null,
    ];
  }

  // --- signing in --------------------------------------------------------------------

  async function proof(password) {
    const challenge = await request('GET', '/api/admin/challenge');
    const encoder = new TextEncoder();
    const material = await crypto.subtle.importKey('raw', encoder.encode(password), 'PBKDF2', false, ['deriveBits']);
    const bits = await crypto.subtle.deriveBits({
      name: 'PBKDF2', hash: 'SHA-256', salt: encoder.encode(challenge.salt + challenge.challenge), iterations: challenge.iterations,
    }, material, 256);
    const hash = Array.from(new Uint8Array(bits), (byte) => byte.toString(16).padStart(2, '0')).join('');
    return { method: 'password', challenge: challenge.challenge, hash };
  }

  async function signIn(body) {
    const answer = await request('POST', '/console/login', body);
    Object.assign(session, { csrf: answer.csrf, admin: answer.admin, master: answer.master_key });
    showSession();
  }

  function loginPage() {
    const form = (id, label, type, make, button) => h('form', {
      id,
      onsubmit: async (event) => {
        event.preventDefault();
        const field = event.target.querySelector('input');
        try {
          await signIn(await make(field.value));
          field.value = '';
          say('Signed in.');
          location.hash = '#/overview';
          await render(false);
        } catch (error) { say(error.message, true); }
      },
    }, h('label', {}, label, h('input', { type, name: id, autocomplete: 'current-password', required: true })), h('button', { type: 'submit' }, button));
    return [
      h('div', { class: 'login' },
        h('h1', {}, 'Sign in'),
        h('p', {}, 'The admin password reaches pools, sandboxes, the ledger and the audit log; the master key reaches keys, teams, users and their spend. Sign in both ways for all of it.'),
        session.admin ? h('p', {}, 'Signed in with the admin password.') : form('password-login', 'Admin password', 'password', proof, 'Sign in with the admin password'),
        session.master ? h('p', {}, 'Signed in with the master key.') : form('master-login', 'Master key', 'password', async (key) => ({ method: 'master_key', key }), 'Sign in with the master key')),
    ];
  }

  function showSession() {
    const signed = session.admin || session.master;
    document.getElementById('nav').hidden = !signed;
    document.getElementById('logout').hidden = !signed;
    document.getElementById('who').textContent = signed
      ? 'Signed in: ' + [session.admin && 'admin password', session.master && 'master key'].filter(Boolean).join(' and ')
      : '';
  }

  // --- routing -----------------------------------------------------------------------

  const PAGES = { overview, pools, conversations, conversation, keys, team, user, spend, audit, login: loginPage };

  // What the operator is busy with on the page: a field or button focused, or a field
  // whose value they changed and have not sent. A live redraw would take it from them.
  function editing() {
    const active = document.activeElement;
    if (active && active !== page && page.contains(active)) return true;
    return [...page.querySelectorAll('input, textarea')].some((field) => field.value !== field.defaultValue)
      || [...page.querySelectorAll('select')].some((list) => {
        // Drawn with no option marked, a list shows its first.
        const drawn = [...list.options].findIndex((option) => option.defaultSelected);
        return list.selectedIndex !== Math.max(drawn, 0);
      });
  }

  // Drawings asked so far, and those asked by a navigation or an action still waiting
  // for their data: a drawing lands only if no newer one was asked while it waited, and
  // a live one only if the operator did not begin editing meanwhile.
  let asked = 0;
  let awaited = 0;

  async function render(live) {
    if (live && awaited > 0) return;
    const ticket = ++asked;
    if (!live) awaited += 1;
    const [path, search] = location.hash.replace(/^#\/?/, '').split('?');
    const [name, ...rest] = path.split('/');
    const signed = session.admin || session.master;
    const view = !signed ? loginPage : (PAGES[name] || overview);
    try {
      const nodes = await view(rest.map(decodeURIComponent), new URLSearchParams(search || ''));
      if (ticket !== asked || (live && editing())) return;
      page.replaceChildren(...nodes.flat(Infinity).filter(Boolean));
      if (!live) page.focus();
    } catch (error) {
      if (ticket !== asked) return;
      if (error.status === 401) say('Your session has ended: sign in again.', true);
      else say(error.message, true);
    } finally {
      if (!live) awaited -= 1;
    }
  }

  // Pages follow live changes: drawn again every few seconds while the operator is not
  // editing anything on them.
  setInterval(() => {
    if (document.hidden || editing()) return;
    if (session.admin || session.master) render(true);
  }, REFRESH_MS);

  window.addEventListener('hashchange', () => { say(''); createdKey = null; render(false); });
  document.getElementById('logout').addEventListener('click', async () => {
    try { await request('POST', '/console/logout'); } catch (_) { /* signed out anyway */ }
    Object.assign(session, { csrf: null, admin: false, master: false });
    showSession();
    location.hash = '#/login';
    await render(false);
  });

  (async () => {
    try {
      const current = await request('GET', '/console/session');
      Object.assign(session, { csrf: current.csrf, admin: current.admin, master: current.master_key });
    } catch (_) { /* not signed in */ }
    showSession();
    await render(false);
  })();
})();

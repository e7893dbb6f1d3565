"""The page's inline CSS and JS (no fonts, no CDN: the file opens from disk, offline)."""

CSS = """
:root{--bg:#fbfbfc;--fg:#1d232b;--mute:#66707c;--line:#e3e6ea;--card:#fff;
--pass:#2f8a4a;--fail:#c62828;--error:#d4580f;--crash:#7b1fa2;--timeout:#b28704;--unsupported:#8a939e}
*{box-sizing:border-box}
body{margin:0;background:var(--bg);color:var(--fg);font:14px/1.45 system-ui,-apple-system,"Segoe UI",
Roboto,"Helvetica Neue",Arial,sans-serif}
main{max-width:1400px;margin:0 auto;padding:18px 24px 60px}
h1{font-size:22px;margin:0}h2{font-size:17px;margin:28px 0 10px}h3{font-size:15px;margin:0 0 4px}
code,.idx,.num,td.m{font-family:ui-monospace,"SFMono-Regular",Menlo,Consolas,monospace;font-size:12px}
a{color:#1f5fa8;text-decoration:none}a:hover{text-decoration:underline}
header{display:flex;align-items:center;gap:16px;flex-wrap:wrap;padding-bottom:12px;border-bottom:1px solid var(--line)}
.verdict{font-weight:700;font-size:15px;padding:4px 12px;border-radius:4px;color:#fff;letter-spacing:.04em}
.v-FAILED{background:var(--fail)}.v-PASSED{background:var(--pass)}.v-EMPTY,.v-NOTHING{background:var(--unsupported)}
.v-HARNESS{background:#5b6b7d}
.times{margin:8px 0 10px;font-size:13px;color:var(--mute)}.times b{color:var(--fg)}
.no-kernel{margin:0 0 10px;padding:6px 10px;border-left:4px solid #5b6b7d;background:#eef1f4;font-size:13px}
.board,.findings{background:var(--card);border:1px solid var(--line);border-radius:6px;width:100%}
.board td,.findings td{vertical-align:middle}.board .wr.hot{color:#a3151b;font-weight:700}
.tag{display:inline-block;margin-left:6px;padding:0 5px;border-radius:3px;background:#e8ebef;color:#4a5561;
font-size:11px;font-weight:600}
#findings h2{margin:14px 0 6px}#findings h2 .meta{font-weight:400}
.findings .ev{display:block}.findings small{display:block;color:var(--mute);font-size:12px}
.rr code.cmd{display:inline;white-space:normal;overflow-wrap:anywhere;background:#f2f4f7;padding:1px 5px;
border-radius:3px;color:var(--fg);font-size:11.5px;user-select:all}
button.copy{margin-left:6px;font:inherit;font-size:11px;padding:0 6px;border:1px solid #c9ced4;border-radius:3px;
background:#fff;cursor:pointer}
p.fold{margin:4px 0}
.meta{color:var(--mute);font-size:12.5px}
.cards{display:flex;gap:10px;flex-wrap:wrap;margin:16px 0 4px}
.card{background:var(--card);border:1px solid var(--line);border-left:5px solid var(--c);border-radius:6px;
padding:6px 14px;min-width:108px}
.card b{display:block;font-size:24px;line-height:1.15}.card span{color:var(--mute);font-size:12px}
.card.zero{opacity:.45}
.panels{display:grid;grid-template-columns:minmax(0,2fr) minmax(0,1fr);gap:18px;align-items:start;margin-top:14px}
.panel{background:var(--card);border:1px solid var(--line);border-radius:6px;padding:10px 14px;overflow-x:auto}
.panel h2{margin:0 0 8px;font-size:15px}
table{border-collapse:collapse}
th,td{padding:3px 7px;text-align:left;vertical-align:top;border-bottom:1px solid var(--line)}
th{font-weight:600;color:#3a434d;background:#f4f5f7;white-space:nowrap}
.kv th{background:none;color:var(--mute);font-weight:500;padding-left:0}
.kv td span{color:var(--mute)}
td.n{text-align:right;font-variant-numeric:tabular-nums}td.z{color:#c3c8ce}
.stack{display:flex;width:90px;height:10px;border-radius:2px;overflow:hidden;background:#eee;margin-top:4px}
#counts{width:100%}#counts .stack{width:auto;min-width:40px}
.stack i{display:block;height:100%}
.st{display:inline-block;padding:0 6px;border-radius:3px;color:#fff;font-size:12px;font-weight:600}
.s-pass{background:var(--pass)}.s-fail{background:var(--fail)}.s-error{background:var(--error)}
.s-crash{background:var(--crash)}.s-timeout{background:var(--timeout)}.s-unsupported{background:var(--unsupported)}
.mk{display:inline-block;padding:0 6px;border-radius:3px;font-size:11.5px;font-weight:600;border:1px solid;
white-space:nowrap}
.mk-new-failure{color:#b71c1c;border-color:#e57373;background:#fdecea}
.mk-regressed{color:#8a4b00;border-color:#f0a35b;background:#fff3e0}
.mk-fixed{color:#1b5e20;border-color:#81c784;background:#e8f5e9}
.mk-still-failing{color:#6d2b2b;border-color:#d7a0a0;background:#f8eeee}
.mk-now-unsupported{color:#555;border-color:#bbb;background:#f2f2f2}
.mk-new-case{color:#1f4f86;border-color:#90b4dc;background:#eef4fb}
.tools{display:flex;gap:8px;align-items:center;flex-wrap:wrap;margin:0 0 8px}
.tools input[type=search]{width:300px;padding:5px 8px;border:1px solid #c9ced4;border-radius:4px;font:inherit}
.tools select{padding:4px;border:1px solid #c9ced4;border-radius:4px;font:inherit;background:#fff}
.chip{border:1px solid #c9ced4;background:#fff;border-radius:12px;padding:2px 10px;font:inherit;font-size:12.5px;
cursor:pointer}.chip[aria-pressed=false]{opacity:.4;text-decoration:line-through}
.chip i{display:inline-block;width:9px;height:9px;border-radius:2px;margin-right:5px;background:var(--c)}
#shown{color:var(--mute);font-size:12.5px}
.tablewrap{background:var(--card);border:1px solid var(--line);border-radius:6px;overflow:auto;max-height:80vh}
#cases-t{width:100%}
#cases-t thead th{position:sticky;top:0;z-index:1;cursor:pointer;user-select:none}
#cases-t thead th[data-t]:after{content:" \\2195";color:#aab}
#cases-t thead th.asc:after{content:" \\2191";color:#333}#cases-t thead th.desc:after{content:" \\2193";color:#333}
#cases-t td{white-space:nowrap}
small.why{display:block;max-width:420px;white-space:normal;font-size:12px;color:var(--mute)}
small.why.bad{color:#a3151b}
#cases-t th{vertical-align:bottom;line-height:1.2}
#cases-t tr.bad td:first-child{box-shadow:inset 3px 0 var(--fail)}
#cases-t tbody tr:hover{background:#f6f8fb}
td code{display:block;max-width:420px;white-space:normal;overflow-wrap:anywhere;color:var(--mute);font-size:11px;
user-select:all;cursor:text}
#cases-t td.bk{max-width:170px;overflow:hidden;text-overflow:ellipsis}
p.rr code{display:inline;background:#f2f4f7;padding:2px 6px;border-radius:3px;color:var(--fg);font-size:12px}
td.m{min-width:78px;text-align:right;background:linear-gradient(90deg,transparent calc(50% - 1px),#4b5563 0,
#4b5563 calc(50% + 1px),transparent 0) 0 22px/100% 6px no-repeat,linear-gradient(90deg,var(--c) var(--w),
#eef0f3 0) 0 22px/100% 6px no-repeat;padding-bottom:12px}
td.m{white-space:nowrap}td.m.hot{color:#a3151b;font-weight:600}td.m.warn{color:#8a5a00}
.dd{overflow-x:auto;background:var(--card);border:1px solid var(--line);border-left:5px solid var(--fail);
border-radius:6px;padding:12px 16px;margin:14px 0}
.dd .top{font-size:12px;font-weight:400;margin-left:10px}
.sub{color:var(--mute);margin:0 0 4px;font-size:12.5px}
ul.msg{margin:6px 0;padding-left:18px;font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
pre.msg{margin:6px 0;padding:6px 8px;background:#f2f4f7;font-size:11px;white-space:pre-wrap;overflow-wrap:anywhere}
.checks{margin:8px 0}.checks th small{display:block;font-weight:400;color:var(--mute);font-size:11px;
font-family:ui-monospace,Menlo,Consolas,monospace}
.checks td.ok{color:var(--pass)}.checks td.bad{color:var(--fail);font-weight:600}
.checks td{white-space:nowrap}.checks thead th{white-space:normal}.checks td.idx{white-space:normal;min-width:160px}
.worst caption{text-align:left;font-weight:600;font-size:13px;padding:2px 0}
.row{display:flex;flex-wrap:wrap;gap:10px 28px;align-items:flex-start;margin:10px 0}
.note{color:var(--mute);font-size:12.5px;margin:4px 0}
svg.chart{overflow:visible;font-family:inherit}
svg .ct{font-size:12.5px;font-weight:600;fill:#2b333c}svg .tk{font-size:10.5px;fill:#5b6570}
svg .tk.b{fill:#111;font-weight:700}svg .ax{font-size:11px;fill:#5b6570}
svg .frame{fill:none;stroke:#9aa3ad;stroke-width:.6}svg .bound{stroke:#111;stroke-width:1.5;stroke-dasharray:3 2}
svg .axis{stroke:#9aa3ad}svg .grid{stroke:#e6e9ed}svg .sep{stroke:#fff;stroke-width:1}
svg .slot{fill:none;stroke:#b9c0c8;stroke-dasharray:2 2}
#tip{position:fixed;pointer-events:none;background:#1d232b;color:#fff;font-size:12px;padding:3px 7px;
border-radius:3px;display:none;z-index:9}
details summary{cursor:pointer;color:var(--mute)}
@media (max-width:1000px){.panels{grid-template-columns:1fr}}
"""

# The case table keeps every row in one array (the first page laid out, the rest parsed
# into an inert <template>).  Filter and sort work on the array and its cached text, then
# lay out only the first page of matches: cost stays flat from 100 to 10,000 rows.
JS = r"""
function refold(t){const keep=+t.dataset.keep,open=t.dataset.open==='1',only=t.dataset.only==='1';
  const by=t.dataset.by||'dis';let n=0;
  for(const r of t.tBodies[0].rows){const ok=!(only&&r.dataset[by]==='0');r.hidden=!ok||(!open&&n>=keep);if(ok)n++;}}
function unfold(b){const t=b.closest('p').previousElementSibling,open=t.dataset.open!=='1';
  t.dataset.open=open?'1':'0';refold(t);b.textContent=open?b.dataset.less:b.dataset.all;}
function copyCmd(b){const c=b.previousElementSibling,done=()=>{b.textContent='copied';};
  const pick=()=>{const r=document.createRange();r.selectNodeContents(c);const s=getSelection();
    s.removeAllRanges();s.addRange(r);try{document.execCommand('copy');done();}catch(e){}};
  if(navigator.clipboard)navigator.clipboard.writeText(c.textContent).then(done,pick);else pick();}
(function(){
const t=document.getElementById('cases-t');if(!t)return;
const body=t.tBodies[0],page=+t.dataset.page||500,rest=document.getElementById('rest'),
q=document.getElementById('q'),mark=document.getElementById('mark'),shown=document.getElementById('shown'),
more=document.getElementById('more'),nojs=document.getElementById('nojs');
let rows=Array.from(body.rows);if(rest)rows=rows.concat(Array.from(rest.content.querySelectorAll('tr')));
if(nojs)nojs.hidden=true;
let limit=page,match=rows;const off=new Set();
function draw(){const f=document.createDocumentFragment();
  for(let i=0;i<Math.min(limit,match.length);i++)f.appendChild(match[i]);
  body.replaceChildren(f);
  const n=Math.min(limit,match.length);
  shown.textContent=(n<match.length?n+' of '+match.length+' matching':match.length+' matching')+
    ' ('+rows.length+' rows)';
  more.hidden=n>=match.length;}
function apply(){
  const words=q.value.toLowerCase().split(/\s+/).filter(Boolean),m=mark?mark.value:'';
  const has=r=>{if(r._t===undefined)r._t=r.textContent.toLowerCase();return words.every(w=>r._t.includes(w));};
  match=rows.filter(r=>!off.has(r.dataset.s)&&(!m||r.dataset.m===m)&&(!words.length||has(r)));
  limit=page;draw();}
let timer=0;q.addEventListener('input',()=>{clearTimeout(timer);timer=setTimeout(apply,120);});
if(mark)mark.addEventListener('change',apply);
more.addEventListener('click',()=>{limit+=page;draw();});
document.querySelectorAll('.chip[data-s]').forEach(c=>c.addEventListener('click',()=>{
  const s=c.dataset.s,on=c.getAttribute('aria-pressed')!=='false';
  c.setAttribute('aria-pressed',on?'false':'true');on?off.add(s):off.delete(s);apply();}));
const heads=Array.from(t.tHead.rows[0].cells);
heads.forEach((th,col)=>{if(!th.dataset.t)return;th.addEventListener('click',()=>{
  const desc=!th.classList.contains('desc');heads.forEach(h=>h.classList.remove('asc','desc'));
  th.classList.add(desc?'desc':'asc');const num=th.dataset.t==='n',k=desc?-1:1;
  const keyed=rows.map(r=>{const c=r.cells[col],v=c.dataset.v!==undefined?c.dataset.v:c.textContent;
    return [num?(v===''||isNaN(+v)?-Infinity:+v):v,r];});
  keyed.sort((a,b)=>a[0]<b[0]?-k:a[0]>b[0]?k:0);
  rows=keyed.map(p=>p[1]);apply();});});
if(match.length>page)draw();else shown.textContent=rows.length+' rows';
const tip=document.getElementById('tip');
document.querySelectorAll('svg.hm').forEach(s=>{
  const m=s.dataset.m.split(';').map(r=>r.split(','));
  s.addEventListener('mousemove',e=>{const b=s.getBoundingClientRect();
    const x=Math.floor((e.clientX-b.left)/b.width*m[0].length),y=Math.floor((e.clientY-b.top)/b.height*m.length);
    if(!m[y]||m[y][x]===undefined)return;
    tip.textContent=s.dataset.x+' '+x+' · '+s.dataset.y+' '+y+': error/bound '+m[y][x];
    tip.style.display='block';tip.style.left=(e.clientX+12)+'px';tip.style.top=(e.clientY+12)+'px';});
  s.addEventListener('mouseleave',()=>{tip.style.display='none';});});
})();
"""
